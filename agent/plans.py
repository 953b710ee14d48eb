"""Behavior plans: blocks of behaviors with sync points, and their validation against the model.

A ``Block`` is what every mind (user command, safety, reflex, script, Director) hands the realizer: a list
of behaviors (action, speech, emotion, gaze, move, scene event, wait), each with sync points (start,
stroke, end) that may refer to other behaviors of the same block ("the wave's stroke on the word 'hello'",
"2 s after the speech ends"). ``resolve`` turns those references into times in seconds from the block's
start; the realizer puts them on the frame clock.

Blocks serialise to JSON (``msgspec.json``) and TOML (``tomllib`` to read, ``agent.toml_writer`` to write).
``validate_block`` checks a block against the capability manifest and raises ``PlanError`` naming the
offending field, e.g. ``behaviors[1].params.paw``.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Mapping
from typing import Literal

import msgspec

from agent.bounds import (
    MAX_BEHAVIORS,
    MAX_BLOCK_S,
    MAX_DURATION_S,
    MAX_OFFSET_S,
    MAX_PLAN_S,
    MAX_PRIORITY,
    MAX_SPEECH_CHARS,
)
from agent.toml_writer import dumps as toml_dumps
from streaming_model.condition import scene_problem
from streaming_model.manifest import ActionSpec, Manifest

Source = Literal["user", "safety", "reflex", "script", "director"]
Channel = Literal["body", "face", "gaze", "voice", "scene"]
Composition = Literal["merge", "append", "replace"]
Point = Literal["start", "stroke", "end"]

SOURCE_RANK: dict[str, int] = {"user": 4, "safety": 3, "reflex": 2, "script": 1, "director": 0}
"""Arbitration order: a higher rank wins a channel (user command > safety > reflex > script > director)."""

CHANNELS: tuple[Channel, ...] = ("body", "face", "gaze", "voice", "scene")

WALK_SPEED_PER_S = 36.0 / 42.0
"""How fast walking moves the character in screen units (x in [-1, 1] spans the walkable floor).

The procedural world walks 1.5 px per frame over a floor 84 px wide; the manifest does not carry this yet.
"""

WALKS = ("walk_left", "walk_right")
"""The actions a ``Move`` is walked with: a model whose manifest lacks them cannot take a move."""

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

SECONDS_PER_CHAR = 0.065
"""Speech duration estimate until the voice reports the real one (about 15 characters per second)."""
SPEECH_PAD_S = 0.3


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


def within_manifest(
    behaviors: list[Behavior], manifest: Manifest, fallbacks: Mapping[str, str] | None = None
) -> list[Behavior]:
    """``behaviors`` as ``manifest`` can show them, for minds that react whatever the model: an action it
    lacks becomes the one the backend declares it draws instead (``fallbacks``, so the minds know what the
    picture shows), else a ``look_at`` becomes a gaze at the same point (the eyes still go there) and any
    other is left out; an emotion it lacks is left out; a move needs both ``WALKS``."""
    actions = {a.name: a for a in manifest.actions}
    fallbacks = fallbacks or {}
    kept: list[Behavior] = []
    for b in behaviors:
        if isinstance(b, Action) and b.name not in actions:
            stand_in = actions.get(fallbacks.get(b.name, ""))
            if stand_in is not None:
                # Only the parameters the stand-in has carry over (a look_at's target to a turn's, say).
                names = {p.name for p in stand_in.params}
                params = {k: v for k, v in b.params.items() if k in names}
                kept.append(msgspec.structs.replace(b, name=stand_in.name, params=params))
                continue
            if b.name != "look_at":
                continue
            x, y = float(b.params.get("target_x", 0.0)), float(b.params.get("target_y", 0.0))
            b = Gaze(id=b.id, start=b.start, end=b.end, x=x, y=y, duration_s=b.duration_s)
        elif isinstance(b, Emotion) and b.emotion not in manifest.emotions:
            continue
        elif isinstance(b, Move) and not set(actions).issuperset(WALKS):
            continue
        kept.append(b)
    return kept


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


# ------------------------------------------------------------------------------------------ speech


def speech_words(text: str) -> list[str]:
    """The words of ``text`` as matched by ``SyncRef.word``: lower case, punctuation stripped."""
    return [w for w in (re.sub(r"[^\w']", "", t).lower() for t in text.split()) if w]


def estimate_speech_s(text: str) -> float:
    """A duration estimate for speaking ``text``, used until the voice reports the real one."""
    return SPEECH_PAD_S + SECONDS_PER_CHAR * len(text.strip())


def word_time(text: str, duration_s: float, word: str, occurrence: int = 1) -> float | None:
    """When the ``occurrence``-th ``word`` starts, spreading ``duration_s`` over the characters spoken."""
    tokens = text.split()
    total = sum(len(t) + 1 for t in tokens) or 1
    target = speech_words(word)
    if len(target) != 1:
        return None
    seen = 0
    chars = 0
    for t in tokens:
        if speech_words(t) == target:
            seen += 1
            if seen == occurrence:
                return duration_s * chars / total
        chars += len(t) + 1
    return None


def heard_prefix(text: str, duration_s: float, played_s: float) -> str:
    """The words of ``text`` fully played within ``played_s`` (what a listener heard before a cut)."""
    tokens = text.split()
    total = sum(len(t) + 1 for t in tokens) or 1
    chars = 0
    heard: list[str] = []
    for t in tokens:
        chars += len(t) + 1
        if duration_s * (chars - 1) / total <= played_s + 1e-9:
            heard.append(t)
        else:
            break
    return " ".join(heard)


# ------------------------------------------------------------------------------------------ timing


def _intrinsic_s(b: Behavior, facts: SpeechFacts | None, position: float, chunk_s: float) -> float | None:
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


def _refs(b: Behavior) -> list[tuple[str, SyncRef]]:
    refs = [("start", b.start), ("end", b.end)]
    if isinstance(b, Action):
        refs.append(("stroke", b.stroke))
    return [(name, r) for name, r in refs if r is not None]


def check_scene(changes: dict[str, str], manifest: Manifest, path: str) -> None:
    """PlanError naming the first scene part or choice the manifest does not draw."""
    specs = {spec.name: spec for spec in manifest.scene}
    if not specs:
        raise PlanError(path, "this model draws no scene (its manifest has none)")
    if not changes:
        raise PlanError(path, f"name at least one scene part; known: {list(specs)}")
    for part, choice in changes.items():
        problem = scene_problem(part, choice, manifest)
        if problem is not None:
            raise PlanError(f"{path}.{part}", problem)


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
    facts = facts or {}
    pinned = pinned or {}
    if pinned and shift is None:
        raise ValueError("pinned starts need the shift the block started with")
    by_id = {b.id: b for b in block.behaviors}
    done: dict[str, Timing] = {}

    def point_time(ref: SyncRef, path: str) -> float:
        if not ref.to:
            return ref.offset_s
        other = by_id[ref.to]
        t = timing_of(other, path)
        if ref.word is not None:
            assert isinstance(other, Speech)
            duration = _intrinsic_s(other, facts.get(other.id), position, chunk_s) or 0.0
            when = word_time(other.text, duration, ref.word, ref.occurrence)
            assert when is not None, "validated"
            return t.start + when + ref.offset_s
        value = {"start": t.start, "stroke": t.stroke, "end": t.end}[ref.point]
        assert value is not None, "validated: only bounded behaviors are referred to by their end"
        return value + ref.offset_s

    def timing_of(b: Behavior, path: str) -> Timing:
        if b.id in done:
            return done[b.id]
        if b.id in path.split(">"):
            raise PlanError(f"behaviors[{b.id}]", f"sync references form a cycle: {path}>{b.id}")
        path = f"{path}>{b.id}" if path else b.id
        length = _intrinsic_s(b, facts.get(b.id), position, chunk_s)
        stroke_in = 0.0
        if isinstance(b, Action):
            stroke_in = b.stroke_s if b.stroke_s is not None else STROKE_FRACTION * (length or 0.0)
        elif isinstance(b, Move):
            stroke_in = length or 0.0
        if b.id in pinned:
            start = pinned[b.id] - (shift or 0.0)
        elif isinstance(b, Action) and b.stroke is not None:
            start = point_time(b.stroke, path) - stroke_in
        elif b.start is not None:
            start = point_time(b.start, path)
        else:
            start = 0.0
        end = start + length if length is not None else None
        if b.end is not None:
            end = max(start + chunk_s, point_time(b.end, path))
        timing = Timing(start=start, stroke=start + stroke_in, end=end)
        done[b.id] = timing
        return timing

    for b in block.behaviors:
        timing_of(b, "")
    if shift is None:
        shift = max(0.0, -min((t.start for t in done.values()), default=0.0))
    if shift > 0:
        done = {
            k: Timing(t.start + shift, t.stroke + shift, None if t.end is None else t.end + shift)
            for k, t in done.items()
        }
    return done, shift


def block_length_s(timings: Mapping[str, Timing], chunk_s: float) -> float:
    """The block's length: the latest bounded end (at least one chunk of ``chunk_s``)."""
    ends = [t.end for t in timings.values() if t.end is not None]
    starts = [t.start for t in timings.values()]
    return max([chunk_s, *ends, *(s + chunk_s for s in starts)])


# -------------------------------------------------------------------------------------- validation


def check_number(value: float, path: str, lo: float | None = None, hi: float | None = None) -> None:
    """Raise ``PlanError`` on ``path`` unless ``value`` is finite and within [``lo``, ``hi``]."""
    if not math.isfinite(value):
        raise PlanError(path, f"must be a finite number, got {value!r}")
    if lo is not None and value < lo:
        raise PlanError(path, f"must be at least {lo}, got {value}")
    if hi is not None and value > hi:
        raise PlanError(path, f"must be at most {hi}, got {value}")


def _check_params(spec: ActionSpec, params: Mapping[str, float | str], path: str) -> None:
    known = {p.name: p for p in spec.params}
    for name, value in params.items():
        p = known.get(name)
        if p is None:
            raise PlanError(
                f"{path}.{name}", f"action {spec.name!r} has no parameter {name!r}; has {sorted(known)}"
            )
        if p.kind == "choice":
            if value not in p.choices:
                raise PlanError(f"{path}.{name}", f"must be one of {list(p.choices)}, got {value!r}")
        elif isinstance(value, str) or isinstance(value, bool):
            raise PlanError(f"{path}.{name}", f"must be a number, got {value!r}")
        else:
            check_number(float(value), f"{path}.{name}", p.minimum, p.maximum)


def _check_ref(ref: SyncRef, path: str, block: Block, index: dict[str, int], self_id: str) -> None:
    check_number(ref.offset_s, f"{path}.offset_s", -MAX_OFFSET_S, MAX_OFFSET_S)
    if not ref.to:
        if ref.word is not None:
            raise PlanError(f"{path}.word", "a word needs `to` naming a speech behavior")
        return
    if ref.to not in index:
        raise PlanError(f"{path}.to", f"no behavior with id {ref.to!r} in this block; ids: {sorted(index)}")
    if ref.to == self_id:
        raise PlanError(f"{path}.to", "a behavior cannot refer to itself")
    other = block.behaviors[index[ref.to]]
    if ref.word is not None:
        if not isinstance(other, Speech):
            raise PlanError(f"{path}.word", f"{ref.to!r} is not a speech behavior, it has no words")
        if ref.occurrence < 1:
            raise PlanError(f"{path}.occurrence", f"must be at least 1, got {ref.occurrence}")
        if word_time(other.text, 1.0, ref.word, ref.occurrence) is None:
            raise PlanError(
                f"{path}.word", f"{ref.word!r} (occurrence {ref.occurrence}) is not in {other.text!r}"
            )
    if (
        ref.point == "end"
        and ref.word is None
        and _intrinsic_s(other, None, 0.0, 0.0) is None
        and other.end is None
    ):
        raise PlanError(
            f"{path}.point", f"{ref.to!r} lasts until the block ends; its end cannot be referred to"
        )


def validate_block(block: Block, manifest: Manifest) -> Block:
    """Check ``block`` against ``manifest`` (its vocabulary, and its clock for the shortest durations);
    return it with ids filled in, or raise ``PlanError``."""
    chunk_s = manifest.chunk_s
    if not block.behaviors:
        raise PlanError("behaviors", "a block needs at least one behavior")
    if len(block.behaviors) > MAX_BEHAVIORS:
        raise PlanError(
            "behaviors", f"at most {MAX_BEHAVIORS} behaviors in a block, got {len(block.behaviors)}"
        )
    block = with_ids(block)
    if block.expires_s is not None:
        check_number(block.expires_s, "expires_s", 0.0, MAX_PLAN_S)
    if block.epoch < 0:
        raise PlanError("epoch", f"must be at least 0, got {block.epoch}")
    if abs(block.priority) > MAX_PRIORITY:
        raise PlanError("priority", f"must be from {-MAX_PRIORITY} to {MAX_PRIORITY}, got {block.priority}")
    if len(set(block.locks)) != len(block.locks):
        raise PlanError("locks", f"name each channel once, got {block.locks}")
    actions = {a.name: a for a in manifest.actions}
    index: dict[str, int] = {}
    for i, b in enumerate(block.behaviors):
        path = f"behaviors[{i}]"
        if b.id in index:
            raise PlanError(f"{path}.id", f"duplicate behavior id {b.id!r}")
        index[b.id] = i
    for i, b in enumerate(block.behaviors):
        path = f"behaviors[{i}]"
        if isinstance(b, Action):
            spec = actions.get(b.name)
            if spec is None:
                raise PlanError(f"{path}.name", f"unknown action {b.name!r}; known: {sorted(actions)}")
            _check_params(spec, b.params, f"{path}.params")
            if b.duration_s is not None:
                check_number(b.duration_s, f"{path}.duration_s", chunk_s / 2, MAX_DURATION_S)
            if b.stroke_s is not None:
                length = _intrinsic_s(b, None, 0.0, chunk_s)
                check_number(b.stroke_s, f"{path}.stroke_s", 0.0, length)
        elif isinstance(b, Speech):
            if not b.text.strip():
                raise PlanError(f"{path}.text", "speech needs some text")
            if len(b.text) > MAX_SPEECH_CHARS:
                raise PlanError(f"{path}.text", f"at most {MAX_SPEECH_CHARS} characters, got {len(b.text)}")
            if b.emotion is not None and b.emotion not in manifest.emotions:
                raise PlanError(
                    f"{path}.emotion", f"unknown emotion {b.emotion!r}; known: {list(manifest.emotions)}"
                )
        elif isinstance(b, Emotion):
            if b.emotion not in manifest.emotions:
                raise PlanError(
                    f"{path}.emotion", f"unknown emotion {b.emotion!r}; known: {list(manifest.emotions)}"
                )
        elif isinstance(b, Gaze):
            check_number(b.x, f"{path}.x", -1.0, 1.0)
            check_number(b.y, f"{path}.y", -1.0, 1.0)
        elif isinstance(b, Move):
            check_number(b.x, f"{path}.x", -1.0, 1.0)
            if not set(actions).issuperset(WALKS):
                raise PlanError(
                    f"{path}.kind", f"this model cannot walk (a move needs the actions {list(WALKS)})"
                )
        elif isinstance(b, SceneEvent):
            if b.name not in manifest.scene_events:
                raise PlanError(
                    f"{path}.name", f"unknown scene event {b.name!r}; known: {list(manifest.scene_events)}"
                )
        elif isinstance(b, SetScene):
            check_scene(b.changes, manifest, f"{path}.changes")
        if isinstance(b, Emotion | Gaze | Wait) and b.duration_s is not None:
            check_number(b.duration_s, f"{path}.duration_s", chunk_s / 2, MAX_DURATION_S)
        for name, ref in _refs(b):
            _check_ref(ref, f"{path}.{name}", block, index, b.id)
        if isinstance(b, Action) and b.stroke is not None and b.start is not None:
            raise PlanError(
                f"{path}.stroke", "give either `start` or `stroke`, not both: one places the other"
            )
    try:
        length = block_length_s(resolve(block, chunk_s=chunk_s), chunk_s)
    except PlanError as exc:
        i = index.get(exc.field.removeprefix("behaviors[").removesuffix("]"), 0)
        raise PlanError(f"behaviors[{i}]", exc.message) from None
    if length > MAX_BLOCK_S:
        raise PlanError("behaviors", f"the block would last {length:.0f} s; at most {MAX_BLOCK_S:.0f} s")
    return block


# ---------------------------------------------------------------------------------------- encoding

_json_decoder = msgspec.json.Decoder(Block)


def block_from_json(data: bytes | str) -> Block:
    """Decode a block from JSON; a wrong shape raises ``PlanError`` naming the field."""
    try:
        return _json_decoder.decode(data)
    except msgspec.ValidationError as exc:
        raise shape_error(exc) from None
    except msgspec.DecodeError as exc:
        raise PlanError("$", f"not valid JSON: {exc}") from None


def block_from_builtins(data: object) -> Block:
    """Convert parsed JSON or TOML (dicts, lists...) into a block; ``PlanError`` names a bad field."""
    try:
        return msgspec.convert(data, Block)
    except msgspec.ValidationError as exc:
        raise shape_error(exc) from None


def block_from_toml(text: str) -> Block:
    """Parse a block from TOML text."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PlanError("$", f"not valid TOML: {exc}") from None
    return block_from_builtins(data)


def block_to_json(block: Block) -> bytes:
    """The block as JSON."""
    return msgspec.json.encode(block)


def block_to_toml(block: Block) -> str:
    """The block as TOML (fields left at their defaults are omitted, as None has no TOML form)."""
    return toml_dumps(msgspec.to_builtins(block))


def shape_error(exc: msgspec.ValidationError) -> PlanError:
    """Turn msgspec's "... - at `$.behaviors[0].name`" into a PlanError on that field."""
    text = str(exc)
    message, sep, where = text.rpartition(" - at `")
    if not sep:
        message, where = text, "$"
    where = where.rstrip("`")
    unknown = re.search(r"unknown field `([^`]+)`", message)
    if unknown:
        where = f"{where}.{unknown.group(1)}"
    return PlanError(where.removeprefix("$.") or "$", message)
