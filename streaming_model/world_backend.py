"""``world``: the procedural world drawn straight from the conditions, as a backend in its own right.

What the tiny model was trained to imitate, without a model: the world's dynamics (``world/state.py``)
advanced under each condition and rendered. It is what minds and clients are developed against without
a model, and what CI uses where the model is not the subject.

Clock: the world's motions are defined per frame at 24 fps (``manifest.FPS``); at another ``fps`` the
world still steps at 24 per second and frame n shows it after ``floor((n + 1) * 24 / fps)`` steps, so a
wave takes as long in seconds at any clock. Picture: the world renders at 128x128; at another size that
render is scaled to fit (nearest pixel, the larger side to the width or height) and centred, and the
margins continue the background (the world's edge columns and rows are background), so nothing is
stretched. Snapshots are exact, rollback reaches ``JOURNAL`` chunks, it is deterministic (the seed changes
nothing), and ``cancel`` is read before every world step.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from dataclasses import dataclass, fields

import msgspec
import numpy as np

from .backend import BackendManifest, Capabilities, Pending
from .blobs import VERSION, BlobError, unwrap, wrap
from .condition import SIDE_SIGN, ChunkCondition, ConditionError, scene_indices
from .kv_cache import RollbackError, SnapshotError
from .manifest import ACTION_INDEX, EMOTION_INDEX, FPS, FRAME_SIZE, FRAMES_PER_CHUNK, build_manifest
from .warmup import measure_costs
from .world.palette import NUM_IDENTITIES
from .world.render import render
from .world.state import SCENE_FIELDS, WorldState, initial_state, step

_VOCABULARY = build_manifest(scene=True)
"""What the world draws: the shipped model's vocabulary, and the scene with the actions toward it."""

JOURNAL = 8
"""Committed chunks a session can roll back."""

LIMITS: dict[str, tuple[int, int]] = {
    "fps": (1, 60),
    "chunk_frames": (1, 48),
    "width": (16, 1024),
    "height": (16, 1024),
}
"""The options ``world`` takes and their bounds (inclusive)."""


class WorldOptions(msgspec.Struct, frozen=True, kw_only=True):
    """The world's clock and picture."""

    fps: int = FPS
    chunk_frames: int = FRAMES_PER_CHUNK
    width: int = FRAME_SIZE
    height: int = FRAME_SIZE

    def check(self) -> None:
        """``ValueError`` naming the first option out of its bounds."""
        for name, (lo, hi) in LIMITS.items():
            value = getattr(self, name)
            if not lo <= value <= hi:
                raise ValueError(f"world option {name} must be in [{lo}, {hi}], got {value}")


@dataclass(frozen=True)
class WorldSnapshot:
    """A world session's committed state."""

    state: WorldState
    index: int
    steps: int  # world steps taken (24 a second)
    last_action: str | None
    phase: int  # world steps since the current action started


@dataclass(frozen=True)
class WorldPending:
    """A chunk drawn and not committed: its frames and the state it leaves."""

    index: int
    frames: np.ndarray
    after: WorldSnapshot


class _WorldDoc(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A ``WorldSnapshot`` as a blob document: the state's fields as lists of floats (exact for float32)."""

    version: int
    kind: str
    state: dict[str, list[float]]
    identity: int
    index: int
    steps: int
    last_action: str | None
    phase: int


class WorldSession:
    """One character in the procedural world."""

    def __init__(self, options: WorldOptions, identity: int, seed: int) -> None:
        self.options, self.seed = options, seed
        self._now = WorldSnapshot(initial_state(np.array([identity])), 0, 0, None, 0)
        self._journal: deque[WorldSnapshot] = deque(maxlen=JOURNAL)
        scale = min(options.width, options.height) / FRAME_SIZE
        self._rows, self._cols = _fit(options.height, scale), _fit(options.width, scale)

    @property
    def index(self) -> int:
        """The next chunk's index."""
        return self._now.index

    def generate(self, cond: ChunkCondition, cancel: threading.Event | None = None) -> WorldPending | None:
        """Step the world through the chunk's frames under ``cond`` and draw them; None once ``cancel`` is
        seen (it is read before every world step). The committed state is copied, never changed."""
        self._check(cond)
        now, o = self._now, self.options
        state = now.state.copy()
        phase = now.phase if cond.action == now.last_action else -1
        steps = now.steps
        action = np.array([ACTION_INDEX[cond.action]])
        emotion = np.array([EMOTION_INDEX[cond.emotion]])
        target, gaze = np.array([cond.target], np.float32), np.array([cond.gaze], np.float32)
        side = np.array([SIDE_SIGN[cond.side if cond.action == "turn" else cond.paw]], np.float32)
        speaking = np.array([float(cond.speaking)], np.float32)
        scene = np.array([scene_indices(cond)], np.int64)
        frames = np.empty((o.chunk_frames, o.height, o.width, 3), np.uint8)
        for j in range(o.chunk_frames):
            frame = now.index * o.chunk_frames + j
            until = (frame + 1) * FPS // o.fps
            while steps < until:
                if cancel is not None and cancel.is_set():
                    return None
                phase += 1
                audio = np.array([cond.audio[j]], np.float32)
                step(state, action, np.array([phase]), target, gaze, side, emotion, speaking, audio, scene)
                steps += 1
            frames[j] = render(state)[0][self._rows[:, None], self._cols[None, :]]
        if cancel is not None and cancel.is_set():
            return None
        return WorldPending(now.index, frames, WorldSnapshot(state, now.index + 1, steps, cond.action, phase))

    def _check(self, cond: ChunkCondition) -> None:
        frames = self.options.chunk_frames
        if len(cond.audio) != frames:
            raise ConditionError(f"audio must hold {frames} values (one per frame), got {len(cond.audio)}")
        if not all(math.isfinite(v) and 0.0 <= v <= 1.0 for v in cond.audio):
            raise ConditionError(f"audio values must be finite and in [0, 1], got {cond.audio}")
        # The condition's own checks, its envelope's length aside (that is this backend's clock).
        msgspec.structs.replace(cond, audio=(0.0,) * FRAMES_PER_CHUNK).validate(_VOCABULARY)

    def decode(self, pending: Pending) -> np.ndarray:
        """The chunk's frames, (chunk_frames, height, width, 3) uint8 (drawn when it was generated)."""
        if not isinstance(pending, WorldPending):
            raise ValueError("a pending chunk of another backend")
        return pending.frames

    def commit(self, pending: Pending) -> None:
        """Take the chunk: the world goes on from where it left it."""
        if not isinstance(pending, WorldPending):
            raise ValueError("a pending chunk of another backend")
        if pending.index != self._now.index:
            raise ValueError(
                f"pending chunk {pending.index} does not follow the session (at {self._now.index})"
            )
        self._journal.append(self._now)
        self._now = pending.after

    def rollback(self, k: int) -> None:
        """Forget the last k committed chunks."""
        if not 0 <= k <= len(self._journal):
            raise RollbackError(
                f"cannot roll back {k} chunks: the journal holds the last {len(self._journal)}"
            )
        for _ in range(k):
            self._now = self._journal.pop()

    def snapshot(self) -> WorldSnapshot:
        """The committed state (exact; states are copied when stepped, so sharing it is safe)."""
        return self._now

    def restore(self, snap: object) -> None:
        """Continue exactly from a snapshot; the rollback journal is cleared (it described another past)."""
        if not isinstance(snap, WorldSnapshot):
            raise SnapshotError("not a snapshot of the world backend")
        self._now = snap
        self._journal.clear()

    def export_state(self, snap: object) -> bytes:
        """The snapshot as a blob of kind ``world``."""
        if not isinstance(snap, WorldSnapshot):
            raise SnapshotError("not a snapshot of the world backend")
        s = snap.state
        state = {f.name: getattr(s, f.name).reshape(-1).tolist() for f in fields(s) if f.name != "identity"}
        doc = _WorldDoc(
            version=VERSION,
            kind="world",
            state=state,
            identity=int(s.identity[0]),
            index=snap.index,
            steps=snap.steps,
            last_action=snap.last_action,
            phase=snap.phase,
        )
        return wrap(doc)

    def import_state(self, data: bytes) -> WorldSnapshot:
        """The snapshot in a ``world`` blob; ``BlobError`` saying why if it is not one."""
        doc = unwrap(data, "world", _WorldDoc)
        template = initial_state(np.array([0]))
        arrays: dict[str, np.ndarray] = {"identity": np.array([doc.identity], np.int64)}
        for f in fields(template):
            if f.name == "identity":
                continue
            want = getattr(template, f.name)
            if f.name not in doc.state and f.name in SCENE_FIELDS:  # a blob from before the scene
                arrays[f.name] = want
                continue
            got = np.asarray(doc.state.get(f.name, ()), np.float32)
            if got.size != want.size:
                raise BlobError("inconsistent (its world state does not fit together)")
            arrays[f.name] = got.reshape(want.shape)
        if not set(doc.state) <= set(arrays) - {"identity"} or not 0 <= doc.identity < NUM_IDENTITIES:
            raise BlobError("inconsistent (its world state does not fit together)")
        if min(doc.index, doc.steps, doc.phase + 1) < 0 or doc.last_action not in (None, *ACTION_INDEX):
            raise BlobError("inconsistent (its world state does not fit together)")
        return WorldSnapshot(WorldState(**arrays), doc.index, doc.steps, doc.last_action, doc.phase)

    def close(self) -> None:
        """Nothing to free."""


class WorldBackend:
    """The procedural world at a clock and picture of its options, warmed up when built."""

    def __init__(self, options: WorldOptions | None = None, warmup_chunks: int = 4) -> None:
        self.options = options = options or WorldOptions()
        options.check()
        vocabulary = build_manifest(
            fps=options.fps,
            frames_per_chunk=options.chunk_frames,
            width=options.width,
            height=options.height,
            scene=True,
        )
        capabilities = Capabilities(
            rollback_depth=JOURNAL,
            snapshots="exact",
            interrupt="step",
            deterministic=True,
            reference_image=False,
        )
        costs = measure_costs(self.open_session(identity=0), warmup_chunks, options.chunk_frames)
        self._manifest = BackendManifest(
            name="world",
            vocabulary=vocabulary,
            first_chunk_frames=options.chunk_frames,
            audio_rate=0,
            capabilities=capabilities,
            costs=costs,
        )

    @property
    def manifest(self) -> BackendManifest:
        """What the world declares."""
        return self._manifest

    def open_session(
        self, identity: int | None = None, seed: int = 0, reference: np.ndarray | None = None
    ) -> WorldSession:
        """A session of a built-in identity (the world draws no reference pictures)."""
        if reference is not None:
            raise ValueError("the world backend takes no reference image: give a built-in identity")
        if identity is None or not 0 <= identity < NUM_IDENTITIES:
            raise ValueError(f"identity must be in [0, {NUM_IDENTITIES})")
        return WorldSession(self.options, identity, seed)


def _fit(size: int, scale: float) -> np.ndarray:
    """For each output pixel along a side of ``size``, the world pixel drawn there: the 128-pixel render
    scaled by ``scale`` and centred, the margins repeating the render's edge (background)."""
    offset = (size - FRAME_SIZE * scale) / 2
    source = np.floor((np.arange(size) + 0.5 - offset) / scale).astype(np.int64)
    return np.clip(source, 0, FRAME_SIZE - 1)
