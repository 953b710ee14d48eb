"""Plans against the capability manifest: ``validate_block`` checks a block against the model's
vocabulary and clock and raises ``PlanError`` naming the offending field (e.g. ``behaviors[1].params.paw``);
``within_manifest`` keeps of some behaviors what a model can show, for minds that react whatever the model.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

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
from agent.plan_timing import block_length_s, intrinsic_s, resolve
from agent.plans import (
    WALKS,
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
    SyncRef,
    Wait,
    with_ids,
)
from agent.speech_timing import word_time
from streaming_model.condition import scene_problem
from streaming_model.manifest import ActionSpec, Manifest


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


def check_number(value: float, path: str, lo: float | None = None, hi: float | None = None) -> None:
    """Raise ``PlanError`` on ``path`` unless ``value`` is finite and within [``lo``, ``hi``]."""
    if not math.isfinite(value):
        raise PlanError(path, f"must be a finite number, got {value!r}")
    if lo is not None and value < lo:
        raise PlanError(path, f"must be at least {lo}, got {value}")
    if hi is not None and value > hi:
        raise PlanError(path, f"must be at most {hi}, got {value}")


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


def validate_block(block: Block, manifest: Manifest) -> Block:
    """Check ``block`` against ``manifest`` (its vocabulary, and its clock for the shortest durations);
    return it with ids filled in, or raise ``PlanError``."""
    _check_size(block)
    block = with_ids(block)
    _check_block_fields(block)
    index = _ids_index(block)
    actions = {a.name: a for a in manifest.actions}
    for i, b in enumerate(block.behaviors):
        _check_behavior(b, f"behaviors[{i}]", block, index, manifest, actions)
    _check_length(block, index, manifest.chunk_s)
    return block


def _check_size(block: Block) -> None:
    if not block.behaviors:
        raise PlanError("behaviors", "a block needs at least one behavior")
    if len(block.behaviors) > MAX_BEHAVIORS:
        raise PlanError(
            "behaviors", f"at most {MAX_BEHAVIORS} behaviors in a block, got {len(block.behaviors)}"
        )


def _check_block_fields(block: Block) -> None:
    if block.expires_s is not None:
        check_number(block.expires_s, "expires_s", 0.0, MAX_PLAN_S)
    if block.epoch < 0:
        raise PlanError("epoch", f"must be at least 0, got {block.epoch}")
    if abs(block.priority) > MAX_PRIORITY:
        raise PlanError("priority", f"must be from {-MAX_PRIORITY} to {MAX_PRIORITY}, got {block.priority}")
    if len(set(block.locks)) != len(block.locks):
        raise PlanError("locks", f"name each channel once, got {block.locks}")


def _ids_index(block: Block) -> dict[str, int]:
    """Each behavior id -> its index in the block; ``PlanError`` on a duplicate."""
    index: dict[str, int] = {}
    for i, b in enumerate(block.behaviors):
        path = f"behaviors[{i}]"
        if b.id in index:
            raise PlanError(f"{path}.id", f"duplicate behavior id {b.id!r}")
        index[b.id] = i
    return index


def _check_behavior(
    b: Behavior,
    path: str,
    block: Block,
    index: dict[str, int],
    manifest: Manifest,
    actions: Mapping[str, ActionSpec],
) -> None:
    """One behavior at ``path``: the fields of its kind, its duration, then its sync references."""
    chunk_s = manifest.chunk_s
    _check_kind(b, path, manifest, actions)
    if isinstance(b, Emotion | Gaze | Wait) and b.duration_s is not None:
        check_number(b.duration_s, f"{path}.duration_s", chunk_s / 2, MAX_DURATION_S)
    for name, ref in _refs(b):
        _check_ref(ref, f"{path}.{name}", block, index, b.id)
    if isinstance(b, Action) and b.stroke is not None and b.start is not None:
        raise PlanError(f"{path}.stroke", "give either `start` or `stroke`, not both: one places the other")


def _check_kind(b: Behavior, path: str, manifest: Manifest, actions: Mapping[str, ActionSpec]) -> None:
    """The fields only a behavior of ``b``'s kind has, against the manifest's vocabulary."""
    if isinstance(b, Action):
        _check_action(b, path, actions, manifest.chunk_s)
    elif isinstance(b, Speech):
        if not b.text.strip():
            raise PlanError(f"{path}.text", "speech needs some text")
        if len(b.text) > MAX_SPEECH_CHARS:
            raise PlanError(f"{path}.text", f"at most {MAX_SPEECH_CHARS} characters, got {len(b.text)}")
        if b.emotion is not None:
            _check_emotion(b.emotion, path, manifest)
    elif isinstance(b, Emotion):
        _check_emotion(b.emotion, path, manifest)
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


def _check_emotion(emotion: str, path: str, manifest: Manifest) -> None:
    if emotion not in manifest.emotions:
        raise PlanError(f"{path}.emotion", f"unknown emotion {emotion!r}; known: {list(manifest.emotions)}")


def _check_action(b: Action, path: str, actions: Mapping[str, ActionSpec], chunk_s: float) -> None:
    spec = actions.get(b.name)
    if spec is None:
        raise PlanError(f"{path}.name", f"unknown action {b.name!r}; known: {sorted(actions)}")
    _check_params(spec, b.params, f"{path}.params")
    if b.duration_s is not None:
        check_number(b.duration_s, f"{path}.duration_s", chunk_s / 2, MAX_DURATION_S)
    if b.stroke_s is not None:
        length = intrinsic_s(b, None, 0.0, chunk_s)
        check_number(b.stroke_s, f"{path}.stroke_s", 0.0, length)


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


def _refs(b: Behavior) -> list[tuple[str, SyncRef]]:
    refs = [("start", b.start), ("end", b.end)]
    if isinstance(b, Action):
        refs.append(("stroke", b.stroke))
    return [(name, r) for name, r in refs if r is not None]


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
        and intrinsic_s(other, None, 0.0, 0.0) is None
        and other.end is None
    ):
        raise PlanError(
            f"{path}.point", f"{ref.to!r} lasts until the block ends; its end cannot be referred to"
        )


def _check_length(block: Block, index: dict[str, int], chunk_s: float) -> None:
    """The block resolves (no cycle, named by the behavior's index) and lasts at most ``MAX_BLOCK_S``."""
    try:
        length = block_length_s(resolve(block, chunk_s=chunk_s), chunk_s)
    except PlanError as exc:
        i = index.get(exc.field.removeprefix("behaviors[").removesuffix("]"), 0)
        raise PlanError(f"behaviors[{i}]", exc.message) from None
    if length > MAX_BLOCK_S:
        raise PlanError("behaviors", f"the block would last {length:.0f} s; at most {MAX_BLOCK_S:.0f} s")
