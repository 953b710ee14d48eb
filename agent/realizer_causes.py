"""The inputs behind the realizer's blocks (each block's causes, input event ids) and their outcomes: a
cause shows in the first chunk its block holds a channel in (``ChunkOutput.reflects``), or is told
unshown when the last block it caused leaves without ever having held one."""

from __future__ import annotations

from collections.abc import Collection, Iterable

from agent.plans import Block, causes_of
from agent.realizer_state import Entry

RECENT_CAUSES = 1024
"""How many recent causes the realizer remembers having been given a block for (``caused``)."""


class RecentCauses:
    """The causes of the blocks submitted last, ``RECENT_CAUSES`` at most (the oldest are forgotten)."""

    def __init__(self) -> None:
        self._causes: dict[str, None] = {}

    def add(self, block: Block) -> None:
        """Remember the causes of ``block``."""
        for cause in causes_of(block):
            self._causes[cause] = None
            if len(self._causes) > RECENT_CAUSES:
                del self._causes[next(iter(self._causes))]

    def __contains__(self, cause: object) -> bool:
        return cause in self._causes


def newly_reflected(
    interrupts: Iterable[str], reflected: set[str], entries: Iterable[Entry], owners: dict[str, str]
) -> list[str]:
    """The causes a chunk shows first: its ``interrupts`` and the causes of the blocks that hold a channel
    in it (``owners``) for the first time. Marks them in ``reflected`` and the entries as reflected."""
    reflects = [c for c in dict.fromkeys(interrupts) if c not in reflected]
    reflected.update(reflects)
    for entry in entries:
        if not entry.reflected and entry.block.id in owners.values():
            entry.reflected = True
            for cause in causes_of(entry.block):
                if cause not in reflected:
                    reflected.add(cause)
                    reflects.append(cause)
    return reflects


def never_shown(entry: Entry, reflected: set[str], entries: Collection[Entry]) -> list[str]:
    """The causes of ``entry``, which has left, that never showed and that no block left (``entries``)
    may still show."""
    return [
        cause
        for cause in causes_of(entry.block)
        if cause not in reflected and not any(cause in causes_of(e.block) for e in entries)
    ]


def causes_behind(entries: Iterable[Entry]) -> set[str]:
    """The inputs behind every block waiting or running."""
    return {cause for entry in entries for cause in causes_of(entry.block)}
