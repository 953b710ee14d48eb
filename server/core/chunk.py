"""A chunk on its way: generated (or being generated) under a decision, until it is sent."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from agent.realizer import ChunkOutput
from streaming_model.condition import ChunkCondition


@dataclass
class ReadyChunk:
    """Media chunk ``index`` (generator chunk ``gen_chunk``): its frames once generated, the events it
    reflects, and when its decision began, was made and its frames were ready (the schedule's clock)."""

    index: int
    gen_chunk: int
    jpegs: list[bytes]
    reflects: tuple[str, ...]
    ready_at: float
    decision: ChunkOutput  # the realizer's, before the voice's envelope
    condition: ChunkCondition  # what was generated
    begun_at: float
    decided_at: float
    replaced: bool = False
    spliced: dict[int, tuple[str, ...]] = field(default_factory=dict)
    """Frame -> the events whose effect first shows in that frame, where a splice (``MediaOut.splice``)
    replaced the chunk's frames from there on while it played."""

    def reflects_at(self, frame: int) -> tuple[str, ...]:
        """The events whose effect first shows in ``frame`` of the chunk."""
        first = self.reflects if frame == 0 else ()
        return ordered(set(first) | set(self.spliced.get(frame, ()))) if frame in self.spliced else first


def adopt(chunk: ReadyChunk, decision: ChunkOutput) -> ReadyChunk:
    """``chunk`` standing for a re-decision with its condition: the decision's events join its reflects."""
    return dataclasses.replace(
        chunk, decision=decision, reflects=ordered(set(chunk.reflects) | set(decision.reflects))
    )


def ordered(event_ids: set[str]) -> tuple[str, ...]:
    """Event ids in the order they were stamped."""
    return tuple(sorted(event_ids, key=_event_order))


def _event_order(event_id: str) -> tuple[int, str]:
    digits = "".join(c for c in event_id if c.isdigit())
    return (int(digits) if digits else 0, event_id)
