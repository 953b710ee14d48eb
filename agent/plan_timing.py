"""When the behaviors of a block run: sync references resolved to seconds from the block's start.

Each behavior has a length of its own (``intrinsic_s``: an action's duration, a speech's estimate or the
voice's report, a walk's distance) and sync points (start, stroke, end) that may refer to those of others in
the same block. ``resolve`` places them all; ``resolve_pinned`` does so for a block already playing, keeping
what has begun where it is. The realizer puts the times on the frame clock.
"""

from __future__ import annotations

from collections.abc import Mapping

from agent.plans import (
    Action,
    Behavior,
    Block,
    Emotion,
    Gaze,
    Move,
    PlanError,
    SceneEvent,
    SetScene,
    Speech,
    SpeechFacts,
    SyncRef,
    Timing,
)
from agent.speech_timing import estimate_speech_s, word_time

WALK_SPEED_PER_S = 36.0 / 42.0
"""How fast walking moves the character in screen units (x in [-1, 1] spans the walkable floor).

The procedural world walks 1.5 px per frame over a floor 84 px wide; the manifest does not carry this yet.
"""

DEFAULT_ACTION_S: dict[str, float] = {
    "turn": 1.0,
    "startle": 0.75,
    "jump": 1.5,
    "nod": 1.0,
    "shake_head": 1.0,
}
"""How long an action lasts when the plan gives no duration (others: ``DEFAULT_HOLD_S``)."""
DEFAULT_HOLD_S = 2.0
STROKE_FRACTION = 0.4
"""Where an action's stroke (its most visible moment) falls when the plan does not say: 40 % in."""


def intrinsic_s(b: Behavior, facts: SpeechFacts | None, position: float, chunk_s: float) -> float | None:
    """A behavior's own length, or None when it lasts until the block ends (at least ``chunk_s``, one
    chunk, for a move or a scene event)."""
    if isinstance(b, Action):
        return b.duration_s if b.duration_s is not None else DEFAULT_ACTION_S.get(b.name, DEFAULT_HOLD_S)
    if isinstance(b, Speech):
        if facts is not None and facts.stopped_s is not None:
            return facts.stopped_s
        if facts is not None and facts.duration_s is not None:
            return facts.duration_s
        return estimate_speech_s(b.text)
    if isinstance(b, Emotion | Gaze):
        return b.duration_s
    if isinstance(b, Move):
        return max(chunk_s, abs(b.x - position) / WALK_SPEED_PER_S)
    if isinstance(b, SceneEvent | SetScene):
        return chunk_s
    return b.duration_s


def resolve(
    block: Block, facts: Mapping[str, SpeechFacts] | None = None, position: float = 0.0, *, chunk_s: float
) -> dict[str, Timing]:
    """Times of every behavior of a validated, id-complete block, in seconds from the block's start, on a
    clock whose chunks last ``chunk_s`` (the shortest a bounded behavior lasts).

    ``facts`` holds what the voice reported per speech id; ``position`` is the character's floor x, from
    which a move's duration follows. A behavior with a ``start`` or ``stroke`` reference is placed by it;
    one without starts at the block's start. If references put anything before 0, the whole block is
    shifted so that its earliest behavior starts at 0 (a stroke on the first word pulls the block back).
    """
    return resolve_pinned(block, facts, position, chunk_s=chunk_s)[0]


def resolve_pinned(
    block: Block,
    facts: Mapping[str, SpeechFacts] | None = None,
    position: float = 0.0,
    pinned: Mapping[str, float] | None = None,
    shift: float | None = None,
    *,
    chunk_s: float,
) -> tuple[dict[str, Timing], float]:
    """``resolve`` for a block already playing: behaviors in ``pinned`` keep their start (seconds from the
    block's start) and the block keeps the ``shift`` it got when it started; returns the timings and the
    shift, so that what has begun stays put and only what has not moves with new speech facts."""
    pinned = pinned or {}
    if pinned and shift is None:
        raise ValueError("pinned starts need the shift the block started with")
    resolver = _Resolver(block, facts or {}, position, pinned, shift, chunk_s)
    for b in block.behaviors:
        resolver.timing_of(b, "")
    done = resolver.done
    if shift is None:
        shift = max(0.0, -min((t.start for t in done.values()), default=0.0))
    if shift > 0:
        done = {
            k: Timing(t.start + shift, t.stroke + shift, None if t.end is None else t.end + shift)
            for k, t in done.items()
        }
    return done, shift


class _Resolver:
    """One resolution of a block: the timings found so far (``done``, before any shift), each found once,
    following references depth first (``path`` is the chain that led to a behavior, to name a cycle)."""

    def __init__(
        self,
        block: Block,
        facts: Mapping[str, SpeechFacts],
        position: float,
        pinned: Mapping[str, float],
        shift: float | None,
        chunk_s: float,
    ) -> None:
        self.by_id = {b.id: b for b in block.behaviors}
        self.facts = facts
        self.position = position
        self.pinned = pinned
        self.shift = shift
        self.chunk_s = chunk_s
        self.done: dict[str, Timing] = {}

    def point_time(self, ref: SyncRef, path: str) -> float:
        """The time ``ref`` names, resolving the behavior it refers to first."""
        if not ref.to:
            return ref.offset_s
        other = self.by_id[ref.to]
        t = self.timing_of(other, path)
        if ref.word is not None:
            assert isinstance(other, Speech)
            duration = intrinsic_s(other, self.facts.get(other.id), self.position, self.chunk_s) or 0.0
            when = word_time(other.text, duration, ref.word, ref.occurrence)
            assert when is not None, "validated"
            return t.start + when + ref.offset_s
        value = {"start": t.start, "stroke": t.stroke, "end": t.end}[ref.point]
        assert value is not None, "validated: only bounded behaviors are referred to by their end"
        return value + ref.offset_s

    def timing_of(self, b: Behavior, path: str) -> Timing:
        """When ``b`` runs; ``PlanError`` when its references lead back to it."""
        if b.id in self.done:
            return self.done[b.id]
        if b.id in path.split(">"):
            raise PlanError(f"behaviors[{b.id}]", f"sync references form a cycle: {path}>{b.id}")
        path = f"{path}>{b.id}" if path else b.id
        length = intrinsic_s(b, self.facts.get(b.id), self.position, self.chunk_s)
        stroke_in = 0.0
        if isinstance(b, Action):
            stroke_in = b.stroke_s if b.stroke_s is not None else STROKE_FRACTION * (length or 0.0)
        elif isinstance(b, Move):
            stroke_in = length or 0.0
        if b.id in self.pinned:
            start = self.pinned[b.id] - (self.shift or 0.0)
        elif isinstance(b, Action) and b.stroke is not None:
            start = self.point_time(b.stroke, path) - stroke_in
        elif b.start is not None:
            start = self.point_time(b.start, path)
        else:
            start = 0.0
        end = start + length if length is not None else None
        if b.end is not None:
            end = max(start + self.chunk_s, self.point_time(b.end, path))
        timing = Timing(start=start, stroke=start + stroke_in, end=end)
        self.done[b.id] = timing
        return timing


def block_length_s(timings: Mapping[str, Timing], chunk_s: float) -> float:
    """The block's length: the latest bounded end (at least one chunk of ``chunk_s``)."""
    ends = [t.end for t in timings.values() if t.end is not None]
    starts = [t.start for t in timings.values()]
    return max([chunk_s, *ends, *(s + chunk_s for s in starts)])
