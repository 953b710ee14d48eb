"""Arbitration: who holds each channel in a chunk.

Each channel goes to the claim of the highest-ranked source, then the higher priority, then the newer
block (``Entry.rank``); a block's ``locks`` claim their channels for its whole run, below its behaviors.
"""

from __future__ import annotations

from collections.abc import Iterable

from agent.plans import Behavior, Channel, behavior_channels
from agent.realizer_state import Entry
from agent.realizer_timing import Timeline

Winners = dict[str, tuple[Entry, Behavior | None]]
"""Channel -> the block holding it in a chunk and its behavior there (None: the block's lock holds it)."""


def award(entries: Iterable[Entry], k: int, timeline: Timeline) -> Winners:
    """Give each channel to its best claim in chunk ``k`` among the running blocks."""
    claims: dict[Channel, list[tuple[tuple[int, int, int, int], Entry, Behavior | None]]] = {}
    b: Behavior | None
    for entry in entries:
        if entry.start is None:
            continue
        rank = entry.rank
        for channel in entry.block.locks:
            claims.setdefault(channel, []).append(((*rank, -1), entry, None))
        block_end = timeline.end_chunk(entry)  # once per block, not once per behavior
        for b in entry.block.behaviors:
            start, end = timeline.span(entry, b, block_end)
            voice = entry.voices.get(b.id)
            if voice is not None and voice.start is None:
                # Speech not yet started keeps claiming until the voice is free, then starts late.
                if start > k or voice.finished:
                    continue
            elif voice is not None and not voice.playing:
                continue
            elif not start <= k < end:
                continue
            for channel in behavior_channels(b):
                claims.setdefault(channel, []).append(((*rank, start), entry, b))
    winners: Winners = {}
    for channel, options in claims.items():
        _, entry, b = max(options, key=lambda o: o[0])
        winners[channel] = (entry, b)
    return winners


def fix_starts(winners: Winners, timeline: Timeline) -> None:
    """A behavior that holds a channel has started: its start chunk stays where it is from now on."""
    for entry, b in winners.values():
        if b is not None and b.id not in entry.fixed:
            entry.fixed[b.id] = timeline.start_chunk(entry, b)
