"""Behavior plans: blocks of behaviors with sync points.

A ``Block`` is what every mind (user command, safety, reflex, script, Director) hands the realizer: a list
of behaviors (action, speech, emotion, gaze, move, scene event, wait), each with sync points (start,
stroke, end) that may refer to other behaviors of the same block ("the wave's stroke on the word 'hello'",
"2 s after the speech ends"). ``agent.plan_timing`` turns those references into times in seconds from the
block's start; the realizer puts them on the frame clock.

``agent.plan_checks`` checks a block against the capability manifest (``PlanError`` names the offending
field, e.g. ``behaviors[1].params.paw``); ``agent.plan_io`` reads and writes blocks as JSON and TOML.
"""

from __future__ import annotations

from typing import Literal

import msgspec

Source = Literal["user", "safety", "reflex", "script", "director"]
Channel = Literal["body", "face", "gaze", "voice", "scene"]
Composition = Literal["merge", "append", "replace"]
Point = Literal["start", "stroke", "end"]

SOURCE_RANK: dict[str, int] = {"user": 4, "safety": 3, "reflex": 2, "script": 1, "director": 0}
"""Arbitration order: a higher rank wins a channel (user command > safety > reflex > script > director)."""

CHANNELS: tuple[Channel, ...] = ("body", "face", "gaze", "voice", "scene")

WALKS = ("walk_left", "walk_right")
"""The actions a ``Move`` is walked with: a model whose manifest lacks them cannot take a move."""


class PlanError(ValueError):
    """A plan that cannot be realised; ``field`` is the path of the bad field (``behaviors[2].emotion``)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class SyncRef(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """A point in time inside a block: ``offset_s`` after a sync point of behavior ``to``.

    ``to`` empty means the block's start. ``word`` (speech only) means the moment that word is spoken: its
    ``occurrence``-th appearance, counted from 1, case and punctuation ignored.
    """

    to: str = ""
    point: Point = "start"
    offset_s: float = 0.0
    word: str | None = None
    occurrence: int = 1


class _Behavior(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    forbid_unknown_fields=True,
    omit_defaults=True,
    tag_field="kind",
):
    """Fields common to every behavior: its id in the block and optional sync constraints."""

    id: str = ""
    start: SyncRef | None = None
    end: SyncRef | None = None


class Action(_Behavior, frozen=True, kw_only=True, tag="action"):
    """Perform a manifest action with parameters; ``stroke`` places its peak (``stroke_s`` in)."""

    name: str
    params: dict[str, float | str] = {}
    duration_s: float | None = None
    stroke_s: float | None = None
    stroke: SyncRef | None = None


class Speech(_Behavior, frozen=True, kw_only=True, tag="speech"):
    """Say ``text``; the voice is synthesised by the server, which reports the real duration."""

    text: str
    emotion: str | None = None


class Emotion(_Behavior, frozen=True, kw_only=True, tag="emotion"):
    """Show an emotion for ``duration_s`` (until the block ends when None)."""

    emotion: str
    duration_s: float | None = None


class Gaze(_Behavior, frozen=True, kw_only=True, tag="gaze"):
    """Look at screen point (x, y) in [-1, 1]^2 for ``duration_s`` (until the block ends when None)."""

    x: float
    y: float = 0.0
    duration_s: float | None = None


class Move(_Behavior, frozen=True, kw_only=True, tag="move"):
    """Walk to floor position ``x`` in [-1, 1]; the duration follows from where the character stands."""

    x: float


class SceneEvent(_Behavior, frozen=True, kw_only=True, tag="scene"):
    """Trigger a scene event from the manifest (instantaneous)."""

    name: str


class SetScene(_Behavior, frozen=True, kw_only=True, tag="set_scene"):
    """Change the scene the model draws (the manifest's ``scene``: light, weather, a door, a prop): each
    part named takes its choice from the behavior's start and keeps it until changed again (instantaneous
    as a behavior; the world changes over a few frames)."""

    changes: dict[str, str]


class Wait(_Behavior, frozen=True, kw_only=True, tag="wait"):
    """Hold nothing for ``duration_s``: a spacer other behaviors can refer to, or to lengthen a block."""

    duration_s: float


Behavior = Action | Speech | Emotion | Gaze | Move | SceneEvent | SetScene | Wait

_CHANNELS_OF: dict[type, tuple[Channel, ...]] = {
    Action: ("body",),
    Emotion: ("face",),
    Gaze: ("gaze",),
    Move: ("body",),
    SceneEvent: ("scene",),
    SetScene: ("scene",),
    Wait: (),
}


def behavior_channels(b: Behavior) -> tuple[Channel, ...]:
    """The channels a behavior needs; speech with an emotion also takes the face while it is spoken."""
    if isinstance(b, Speech):
        return ("voice", "face") if b.emotion is not None else ("voice",)
    return _CHANNELS_OF[type(b)]


class Block(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """A unit of behavior handed to the realizer.

    composition: ``merge`` starts now beside what runs; ``append`` starts when the same source's blocks
    that share a channel with it have ended; ``replace`` ends the same source's blocks first.
    epoch: blocks older than the realizer's current epoch for their source die at dispatch.
    expires_s: a block not started within this many seconds of submission is dropped.
    locks: channels held for the whole block even where no behavior uses them (lower sources get none).
    cause: the id of the event this block answers (reported in the chunk's ``reflects``); also: the ids of
    further events it answers (inputs the Director took into one reply), reported with it.
    """

    behaviors: list[Behavior]
    id: str = ""
    source: Source = "director"
    priority: int = 0
    epoch: int = 0
    composition: Composition = "merge"
    expires_s: float | None = None
    locks: list[Channel] = []
    cause: str | None = None
    also: tuple[str, ...] = ()
    label: str = ""

    def channels(self) -> frozenset[str]:
        """Every channel this block uses or locks."""
        used = {c for b in self.behaviors for c in behavior_channels(b)}
        return frozenset(used | set(self.locks))


class Timing(msgspec.Struct, frozen=True):
    """When a behavior runs, in seconds from its block's start; ``end`` None means until the block ends."""

    start: float
    stroke: float
    end: float | None


class SpeechFacts(msgspec.Struct, frozen=True):
    """What the voice reported about one speech behavior: its real duration, and where it stopped."""

    duration_s: float | None = None
    stopped_s: float | None = None


# ---------------------------------------------------------------------------------------------- ids


def causes_of(block: Block) -> tuple[str, ...]:
    """Every event ``block`` answers: its cause, then those it answers too."""
    return ((block.cause,) if block.cause else ()) + tuple(c for c in block.also if c != block.cause)


def with_ids(block: Block) -> Block:
    """A copy of ``block`` whose behaviors all have ids (``<kind><n>`` for those without one)."""
    counts: dict[str, int] = {}
    taken = {b.id for b in block.behaviors if b.id}
    behaviors: list[Behavior] = []
    for b in block.behaviors:
        if not b.id:
            kind = str(type(b).__struct_config__.tag)  # every behavior is tagged by a string
            n = counts.get(kind, 0)
            while True:
                n += 1
                candidate = f"{kind}{n}"
                if candidate not in taken:
                    break
            counts[kind] = n
            taken.add(candidate)
            b = msgspec.structs.replace(b, id=candidate)
        behaviors.append(b)
    return msgspec.structs.replace(block, behaviors=behaviors)
