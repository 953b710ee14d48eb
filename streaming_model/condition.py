"""Per-chunk conditions: the typed form callers write and the numeric form the world and model read.

A condition holds for one chunk (``frames_per_chunk`` frames of the manifest it is validated against). The action phase (frames since the action started) is not part
of what a caller writes: the runtime counts it, because it follows from the sequence of conditions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import msgspec
import numpy as np

from .manifest import (
    ACTION_INDEX,
    EMOTION_INDEX,
    FPS,
    FRAMES_PER_CHUNK,
    SCENE,
    SIDES,
    WORLD_ACTIONS,
    Manifest,
    build_manifest,
)

# Frequencies (Hz) of the world's cyclic motions; phase features at these make cycles easy to learn.
CYCLE_HZ: tuple[float, ...] = (2.0, 2.5, 1.0 / 0.75)
PHASE_CLIP_S = 4.0
# Which actions read a target point and which a side (wave's paw, turn's facing): for the others these
# inputs are zeroed, so the model sees them only where they mean something.
_USES_TARGET = np.array(
    [any(p.name.startswith("target") for p in a.params) for a in WORLD_ACTIONS], np.float32
)
_USES_SIDE = np.array([any(p.name in ("paw", "side") for p in a.params) for a in WORLD_ACTIONS], np.float32)
SIDE_SIGN = {"other": 0.0, "left": -1.0, "right": 1.0}  # a side as the sign of the facing it ends on
# They enter at 4x the scale of the other inputs: an action's parameters decide only its first frames, so
# the model sees little of them, and a larger input makes its weights for them learn faster.
PARAM_GAIN = 4.0
CONT_DIM = 2 + 2 + 1 + 1 + FRAMES_PER_CHUNK * (1 + 1 + 2 * len(CYCLE_HZ))
SCENE_DIM = sum(len(spec.choices) for spec in SCENE)
"""Continuous inputs a model trained on the scene reads besides ``CONT_DIM`` (``scene_features``)."""


_OWN = build_manifest()
"""The tiny model's manifest: what a condition is validated against unless another is given."""
_WORLD = build_manifest(scene=True)
"""The world's vocabulary: where a scene part's default is read when no manifest is given."""


class ConditionError(ValueError):
    """A chunk condition that the model cannot accept (unknown action, wrong shape, out of range)."""


class ChunkCondition(msgspec.Struct, frozen=True):
    """What the character should do during one chunk.

    target: look_at's point; gaze: where the eyes look for any other action. Both in [-1, 1]^2 screen
    units (x right, y down). paw: wave's paw; side: the side a turn ends facing ("other": around).
    audio: the voice envelope of the chunk's frames (``frames_per_chunk`` values), in [0, 1]; the default
    is the tiny model's chunk of silence, so a caller at another clock gives its own.
    """

    action: str = "idle"
    target: tuple[float, float] = (0.0, 0.0)
    gaze: tuple[float, float] = (0.0, 0.0)
    paw: str = "right"
    emotion: str = "neutral"
    speaking: bool = False
    audio: tuple[float, ...] = (0.0,) * FRAMES_PER_CHUNK
    side: str = "other"
    scene: tuple[tuple[str, str], ...] = ()
    """(part, choice) pairs of the manifest's scene, each part at most once; a part left out is at its
    default. The scene is held, not an event: a condition names the scene its chunk shows."""

    def scene_choice(self, part: str, manifest: Manifest | None = None) -> str:
        """The choice this condition holds for a scene part (its default where not named)."""
        for name, choice in self.scene:
            if name == part:
                return choice
        spec = {s.name: s for s in (manifest or _WORLD).scene}[part]
        return spec.default

    @property
    def voice(self) -> tuple[float, ...]:
        """The envelope while speaking, else silence: what the decoder's mouth reads, frame by frame."""
        return self.audio if self.speaking else (0.0,) * len(self.audio)

    def validate(self, manifest: Manifest | None = None) -> None:
        """Raise ConditionError naming the first problem found against ``manifest`` (its actions, emotions
        and chunk length; by default the tiny model's own)."""
        m = manifest or _OWN
        actions = [a.name for a in m.actions]
        if self.action not in actions:
            raise ConditionError(f"unknown action {self.action!r}; known: {sorted(actions)}")
        if self.emotion not in m.emotions:
            raise ConditionError(f"unknown emotion {self.emotion!r}; known: {sorted(m.emotions)}")
        if self.paw not in ("left", "right"):
            raise ConditionError(f"paw must be 'left' or 'right', got {self.paw!r}")
        if self.side not in SIDES:
            raise ConditionError(f"side must be one of {list(SIDES)}, got {self.side!r}")
        if len(self.audio) != m.frames_per_chunk:
            raise ConditionError(
                f"audio must hold {m.frames_per_chunk} values (one per frame), got {len(self.audio)}"
            )
        for name, pair in (("target", self.target), ("gaze", self.gaze)):
            if len(pair) != 2:
                raise ConditionError(f"{name} must be an (x, y) pair, got {len(pair)} values")
            if not all(math.isfinite(v) and -1.0 <= v <= 1.0 for v in pair):
                raise ConditionError(f"{name} values must be finite and in [-1, 1], got {pair}")
        if not all(math.isfinite(v) and 0.0 <= v <= 1.0 for v in self.audio):
            raise ConditionError(f"audio values must be finite and in [0, 1], got {self.audio}")
        _check_scene(self.scene, m)


def _check_scene(scene: tuple[tuple[str, str], ...], m: Manifest) -> None:
    """ConditionError naming the first scene part or choice the manifest does not draw."""
    seen: set[str] = set()
    for part, choice in scene:
        problem = scene_problem(part, choice, m)
        if problem is not None:
            raise ConditionError(problem)
        if part in seen:
            raise ConditionError(f"scene part {part!r} named twice")
        seen.add(part)


def scene_problem(part: str, choice: str, manifest: Manifest) -> str | None:
    """What is wrong with naming ``choice`` for scene part ``part`` to a model of ``manifest`` (None:
    nothing). Conditions and plans both say it so."""
    specs = {s.name: s for s in manifest.scene}
    spec = specs.get(part)
    if spec is None:
        known = f"known: {sorted(specs)}" if specs else "this model draws no scene"
        return f"unknown scene part {part!r}; {known}"
    if choice not in spec.choices:
        return f"{part} must be one of {list(spec.choices)}, got {choice!r}"
    return None


@dataclass
class ChunkCodes:
    """Numeric conditions for a batch of chunk sequences, shapes (N, K) and (N, K, 4)."""

    action: np.ndarray  # int64 action index
    emotion: np.ndarray  # int64 emotion index
    target: np.ndarray  # (N, K, 2) float32
    gaze: np.ndarray  # (N, K, 2) float32
    side: np.ndarray  # float32, -1 left / +1 right (wave's paw, turn's facing), 0 a turn around
    speaking: np.ndarray  # float32 0/1
    audio: np.ndarray  # (N, K, 4) float32
    phase0: np.ndarray  # int64, frames since the action started, at the chunk's first frame
    scene: np.ndarray | None = None  # (N, K, len(SCENE)) int64 choice per scene part; None: the default

    def chunk(self, n: int, k: int) -> ChunkCodes:
        """A 1x1 view of chunk k of sequence n."""
        s = (slice(n, n + 1), slice(k, k + 1))
        return ChunkCodes(**{f: getattr(self, f)[s] for f in _FIELDS}, scene=_part(self.scene, s))

    def window(self, start: int, stop: int) -> ChunkCodes:
        """Chunks [start, stop) of every sequence."""
        s = (slice(None), slice(start, stop))
        return ChunkCodes(**{f: getattr(self, f)[s] for f in _FIELDS}, scene=_part(self.scene, s))

    def scene_codes(self) -> np.ndarray:
        """The scene choices, (N, K, len(SCENE)) int64: zeros (every part at its default) where unset."""
        if self.scene is not None:
            return self.scene
        return np.zeros((*self.action.shape, len(SCENE)), np.int64)


def _part(a: np.ndarray | None, s: tuple[slice, slice]) -> np.ndarray | None:
    return None if a is None else a[s]


def scene_indices(cond: ChunkCondition) -> list[int]:
    """A condition's scene as the index of each part's choice, in the order of ``SCENE``."""
    return [spec.choices.index(cond.scene_choice(spec.name, _WORLD)) for spec in SCENE]


_FIELDS = ("action", "emotion", "target", "gaze", "side", "speaking", "audio", "phase0")


def encode(
    conditions: list[ChunkCondition], phase0: list[int], manifest: Manifest | None = None
) -> ChunkCodes:
    """Encode one sequence of conditions (N=1, K=len) with their action phases, validated against
    ``manifest`` (the tiny model's by default); the scene is encoded where the manifest has one."""
    if len(conditions) != len(phase0):
        raise ConditionError(f"{len(conditions)} conditions but {len(phase0)} phases")
    for c in conditions:
        c.validate(manifest)

    def arr(values: list, dtype: type) -> np.ndarray:
        return np.asarray(values, dtype=dtype)[None]

    return ChunkCodes(
        action=arr([ACTION_INDEX[c.action] for c in conditions], np.int64),
        emotion=arr([EMOTION_INDEX[c.emotion] for c in conditions], np.int64),
        target=arr([c.target for c in conditions], np.float32),
        gaze=arr([c.gaze for c in conditions], np.float32),
        side=arr([SIDE_SIGN[c.side if c.action == "turn" else c.paw] for c in conditions], np.float32),
        speaking=arr([float(c.speaking) for c in conditions], np.float32),
        audio=arr([c.audio for c in conditions], np.float32),
        phase0=arr(phase0, np.int64),
        scene=arr([scene_indices(c) for c in conditions], np.int64) if manifest and manifest.scene else None,
    )


def continuous_features(codes: ChunkCodes, scene: bool = False) -> np.ndarray:
    """The model's continuous condition vector per chunk, (N, K, CONT_DIM) float32; with ``scene`` (a model
    trained on the scene), (N, K, CONT_DIM + SCENE_DIM), the scene's features last (``scene_features``).

    Phase enters as seconds (clipped) and as sin/cos at the world's cycle frequencies, per frame, so
    that where a wave or nod is in its cycle is a smooth function of the input. The target and the side are
    zero for actions that do not take them (and scaled up by ``PARAM_GAIN`` for those that do).
    """
    frames = codes.phase0[..., None] + np.arange(FRAMES_PER_CHUNK)  # (N, K, 4)
    t = frames.astype(np.float32) / FPS
    feats = [
        codes.target * (PARAM_GAIN * _USES_TARGET[codes.action])[..., None],
        codes.gaze,
        (codes.side * PARAM_GAIN * _USES_SIDE[codes.action])[..., None],
        codes.speaking[..., None],
        codes.audio * codes.speaking[..., None],
        np.minimum(t, PHASE_CLIP_S) / PHASE_CLIP_S,
    ]
    for hz in CYCLE_HZ:
        feats.append(np.sin(2 * np.pi * hz * t))
        feats.append(np.cos(2 * np.pi * hz * t))
    out = np.concatenate(feats, axis=-1).astype(np.float32)
    assert out.shape[-1] == CONT_DIM
    return np.concatenate([out, scene_features(codes)], axis=-1) if scene else out


def scene_features(codes: ChunkCodes) -> np.ndarray:
    """(N, K, SCENE_DIM) float32: for each scene part, a one-hot of its choice, the default included, so
    that going back to today's world (day, clear, no door) is asked for as plainly as leaving it: with the
    default left out (all zeros), a model trained 4,500 steps never brought the day back. Weights for
    these inputs start at zero (``dit.with_scene``), so a grown model starts exactly as the one without
    them. Scaled by ``PARAM_GAIN``, as the action parameters are, so that weights starting at zero learn
    fast enough: a transformer fine-tuned 2,700 steps on unscaled ones drew the scenes it saw most (dusk,
    a door, a ball) whatever it was asked."""
    picks = codes.scene_codes()
    out = [np.eye(len(spec.choices), dtype=np.float32)[picks[..., p]] for p, spec in enumerate(SCENE)]
    return np.concatenate(out, axis=-1) * PARAM_GAIN


def next_phase(prev_action: str | None, prev_phase0: int, action: str) -> int:
    """Action phase at a chunk's first frame: restarts at 0 when the action changes, else runs on."""
    if prev_action != action:
        return 0
    return prev_phase0 + FRAMES_PER_CHUNK


def phases(conditions: list[ChunkCondition]) -> list[int]:
    """The action phase at each chunk's first frame of a sequence that starts fresh."""
    out, prev, p = [], None, 0
    for c in conditions:
        p = next_phase(prev, p, c.action)
        out.append(p)
        prev = c.action
    return out
