"""Where a running block's behaviors fall on the realizer's chunk clock: the chunks each one spans, the
block's end, the strokes reached, and the block's timings resolved again when its speech facts change."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from agent.plan_timing import block_length_s, resolve_pinned
from agent.plans import Action, Behavior, Move, Speech, SpeechFacts
from agent.realizer_state import Entry
from agent.speech_timing import estimate_speech_s


class Timeline:
    """The chunk clock of one realizer's running blocks: ``chunk_s`` seconds a chunk, and ``clock`` gives
    the last chunk ticked (open speech lasts at least past it)."""

    def __init__(self, chunk_s: float, clock: Callable[[], int]) -> None:
        self.chunk_s = chunk_s
        self._clock = clock

    def retime(self, entry: Entry) -> None:
        """Resolve the block's timings again (new speech facts, speech started late); started behaviors
        stay where they are."""
        assert entry.start is not None
        facts = {
            bid: SpeechFacts(duration_s=v.duration_s, stopped_s=v.stopped_s)
            for bid, v in entry.voices.items()
        }
        pinned = {bid: (chunk - entry.start) * self.chunk_s for bid, chunk in entry.fixed.items()}
        entry.timings, entry.shift = resolve_pinned(
            entry.block, facts, entry.position, pinned, entry.shift, chunk_s=self.chunk_s
        )

    def start_chunk(self, entry: Entry, b: Behavior) -> int:
        """The chunk behavior ``b`` starts in: started behaviors keep their start chunk."""
        assert entry.start is not None
        return entry.fixed.get(b.id, entry.start + round(entry.timings[b.id].start / self.chunk_s))

    def span(self, entry: Entry, b: Behavior, block_end: int | None = None) -> tuple[int, int]:
        """Chunks [start, end) of behavior ``b``; ``block_end`` is ``end_chunk(entry)`` when the caller has
        it (a behavior that lasts until the block ends needs it, and it costs a pass over the block)."""
        assert entry.start is not None
        t = entry.timings[b.id]
        start = self.start_chunk(entry, b)
        if isinstance(b, Speech):
            voice = entry.voices[b.id]
            length = voice.stopped_s if voice.stopped_s is not None else voice.duration_s
            if length is None:
                length = estimate_speech_s(b.text)
            end = start + max(1, math.ceil(length / self.chunk_s - 1e-9))
            if voice.open and not voice.finished:
                end = max(end, self._clock() + 2)  # it lasts at least as long as its text is still coming
            return start, end
        if t.end is None:
            return start, self.end_chunk(entry) if block_end is None else block_end
        return start, max(start + 1, entry.start + round(t.end / self.chunk_s))

    def end_chunk(self, entry: Entry) -> int:
        """The chunk the running block ends at (its first chunk after the last behavior's)."""
        assert entry.start is not None
        end = entry.start + max(1, round(block_length_s(entry.timings, self.chunk_s) / self.chunk_s))
        for b in entry.block.behaviors:
            if isinstance(b, Speech) or (b.id in entry.fixed and entry.timings[b.id].end is not None):
                end = max(end, self.span(entry, b)[1])
        return end

    def reach_strokes(self, entries: Iterable[Entry], k: int) -> list[tuple[Entry, Action | Move]]:
        """Mark the actions and moves whose stroke falls by chunk ``k`` and were not marked before; returns
        them, in block order, for their ``StrokeReached``."""
        reached: list[tuple[Entry, Action | Move]] = []
        for entry in entries:
            if entry.start is None:
                continue
            for b in entry.block.behaviors:
                if isinstance(b, Action | Move) and b.id not in entry.strokes:
                    start = self.start_chunk(entry, b)
                    stroke = start + round(
                        (entry.timings[b.id].stroke - entry.timings[b.id].start) / self.chunk_s
                    )
                    if k >= stroke:
                        entry.strokes.add(b.id)
                        reached.append((entry, b))
        return reached
