"""The backend protocol: what any streaming video model implements to sit behind onstage's minds.

    backend = open_backend("world", {"fps": "16"})          # streaming_model.backends
    session = backend.open_session(identity=2, seed=7)
    pending = session.generate(cond, cancel)                 # None if cancel was seen; nothing committed
    frames = session.decode(pending)                         # (frames, height, width, 3) uint8
    session.commit(pending)                                  # the session takes the chunk
    session.rollback(1); snap = session.snapshot(); session.restore(snap)
    blob = session.export_state(snap); session.restore(session.import_state(blob))

A backend declares in its ``BackendManifest`` its clock and picture and vocabulary (``vocabulary``, a
``Manifest``), what it draws for actions it lacks (``fallbacks``), what it can do (``Capabilities``) and
what its chunks cost (``Costs``, measured at warm-up). A chunk's frames come from ``decode`` before the
session takes it with ``commit``: the frames go out first, and the cache is written after them (the
model worker commits a chunk when the next one is made, so a chunk not yet sent is replaced by simply
generating it again). Callers read those instead of assuming a model:
no rollback means no replacement of a generated chunk; snapshots other than exact make a story rewind
approximate. A session is used from one thread at a time (the model worker's); ``cancel`` may be set from
any thread. docs/backends.md says how to write one.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Literal, Protocol, TypeGuard

import msgspec
import numpy as np

from .condition import ChunkCondition
from .manifest import Manifest

SnapshotKind = Literal["exact", "approximate", "none"]
Interrupt = Literal["block", "step", "chunk", "none"]
Batching = Literal["exact", "approximate", "none"]
BatchingChoice = Literal["off", "exact", "approximate"]
"""How far a server lets its sessions' chunks be batched: not at all, only where each session's frames stay
byte-identical to its frames alone, or wherever the backend batches."""


class Capabilities(msgspec.Struct, frozen=True, kw_only=True):
    """What a backend's sessions support.

    rollback_depth: how many committed chunks ``rollback`` can undo (0: none). snapshots: whether a
    restored snapshot continues bit-exactly (``exact``), close to it (``approximate``) or not at all
    (``none``: ``snapshot`` raises). interrupt: how soon a set ``cancel`` stops ``generate``: between
    transformer blocks, between denoise steps (or frames), only before a chunk starts, or never.
    deterministic: the same seed and conditions give the same frames. reference_image: ``open_session``
    takes a reference picture of the character. batching: whether the backend generates several
    sessions' chunks in one pass (``BatchingBackend``): ``exact`` when every session's frames are
    byte-identical to those it gets alone, ``approximate`` when they may differ in their last bits (the
    number kernels sum in another order at another batch size), ``none`` when it does not batch.
    """

    rollback_depth: int
    snapshots: SnapshotKind
    interrupt: Interrupt
    deterministic: bool
    reference_image: bool
    batching: Batching = "none"


class Costs(msgspec.Struct, frozen=True, kw_only=True):
    """Milliseconds, measured at warm-up on the machine serving: generating a chunk (p50, p95), finishing
    one (``decode``: from a generated chunk to its frames), committing one (``commit``, done after its
    frames are out), a fresh session's first chunk, and from a set ``cancel`` to ``generate`` returning.
    A batching backend adds ``batch_p50_ms``: a whole chunk (generate, decode, commit) of 1, 2, ...
    sessions at once, the batch's median time for each batch size."""

    chunk_p50_ms: float
    chunk_p95_ms: float
    finish_p50_ms: float
    first_chunk_ms: float
    interrupt_ms: float
    commit_p50_ms: float = 0.0
    batch_p50_ms: tuple[float, ...] = ()

    def batch_ms(self, sessions: int) -> float:
        """Milliseconds a whole chunk of ``sessions`` sessions takes: one batch where the backend batches
        (past the largest batch measured, growing as the last measured step did), one after another where
        it does not."""
        if sessions <= 0:
            return 0.0
        measured = self.batch_p50_ms or (self.chunk_p50_ms + self.finish_p50_ms + self.commit_p50_ms,)
        if sessions <= len(measured):
            return measured[sessions - 1]
        step = measured[-1] - measured[-2] if len(measured) > 1 else measured[-1]
        return measured[-1] + step * (sessions - len(measured))


class BackendManifest(msgspec.Struct, frozen=True, kw_only=True):
    """Everything a backend declares: the one thing agent/ and server/ read about the model.

    vocabulary: its clock (fps, frames per chunk), picture (width, height) and what a condition may name.
    first_chunk_frames: frames of a session's first chunk (often more than later ones). audio_rate: the
    sample rate it wants the voice at (0: it does not take audio). fallbacks: an action it lacks -> the one
    it draws instead (any other unknown action draws ``idle``).
    """

    name: str
    vocabulary: Manifest
    first_chunk_frames: int
    audio_rate: int
    capabilities: Capabilities
    costs: Costs
    fallbacks: dict[str, str] = {}


class Pending(Protocol):
    """A generated, uncommitted chunk; only the session that made it reads its contents."""

    @property
    def index(self) -> int:
        """The chunk index it would take when committed."""
        ...


class BackendSession(Protocol):
    """One character on one call. Nothing committed changes before ``commit``; a chunk's frames
    (``decode``) do not depend on whether it was committed yet."""

    @property
    def index(self) -> int:
        """The next chunk's index (chunks committed so far, less those rolled back)."""
        ...

    @property
    def seed(self) -> int:
        """The session's seed."""
        ...

    def generate(self, cond: ChunkCondition, cancel: threading.Event | None = None) -> Pending | None:
        """The next chunk under ``cond``; None if ``cancel`` was seen first (see ``Capabilities.interrupt``).
        ``ConditionError`` for a condition it cannot take. Side-effect free: committed state stays."""
        ...

    def decode(self, pending: Pending) -> np.ndarray:
        """The frames of a generated chunk, (frames, height, width, 3) uint8, whether it was committed yet or
        not. Side-effect free: the frames go out before the session takes the chunk (``commit``), and a
        chunk decoded but never committed leaves no trace."""
        ...

    def commit(self, pending: Pending) -> None:
        """Make ``pending`` part of the session (the next chunk continues from it: a model writes its cache
        here). ``ValueError`` if it does not follow the session's last committed chunk."""
        ...

    def rollback(self, k: int) -> None:
        """Forget the last ``k`` committed chunks (``RollbackError`` past ``rollback_depth``)."""
        ...

    def snapshot(self) -> object:
        """The committed state, opaque to callers (``SnapshotError`` if snapshots are ``none``)."""
        ...

    def restore(self, snap: object) -> None:
        """Continue from a snapshot of this backend (``SnapshotError``, nothing changed, for another's)."""
        ...

    def export_state(self, snap: object) -> bytes:
        """A snapshot as portable bytes that cannot run code (for the story store)."""
        ...

    def import_state(self, data: bytes) -> object:
        """The snapshot in ``data``; ``SnapshotError`` saying why if it is not one of this backend's."""
        ...

    def close(self) -> None:
        """Free what the session holds. Idempotent."""
        ...


class Backend(Protocol):
    """A streaming video model, loaded and warmed up: it opens sessions."""

    @property
    def manifest(self) -> BackendManifest:
        """What it declares (costs measured at its warm-up)."""
        ...

    def open_session(
        self, identity: int | None = None, seed: int = 0, reference: np.ndarray | None = None
    ) -> BackendSession:
        """A session for a built-in identity or a reference picture (prefilled: call it off the loop)."""
        ...


class BatchingBackend(Backend, Protocol):
    """A backend whose sessions' chunks can be generated, decoded and committed several at once (its
    manifest declares ``batching`` other than ``none``). Every session given must be one of its own; each
    keeps its own state, seed and chunk index, and a batch does to each what ``generate``, ``decode`` and
    ``commit`` alone do (bit for bit when ``batching`` is ``exact``)."""

    def generate_many(
        self,
        sessions: Sequence[BackendSession],
        conds: Sequence[ChunkCondition],
        cancels: Sequence[threading.Event | None],
    ) -> list[Pending | None]:
        """Each session's next chunk under its condition, side-effect free; None for a session whose
        ``cancel`` was seen first. ``ConditionError`` for a condition it cannot take (nothing generated)."""
        ...

    def decode_many(
        self, sessions: Sequence[BackendSession], pendings: Sequence[Pending]
    ) -> list[np.ndarray]:
        """``decode`` for each session's pending chunk, in one pass; their frames in order."""
        ...

    def commit_many(self, sessions: Sequence[BackendSession], pendings: Sequence[Pending]) -> None:
        """``commit`` for each session and its pending chunk, in one pass."""
        ...


def can_batch(backend: Backend) -> TypeGuard[BatchingBackend]:
    """Whether ``backend`` declares batching (and so has ``generate_many``, ``decode_many`` and
    ``commit_many``)."""
    return backend.manifest.capabilities.batching != "none"


def apply_fallbacks(cond: ChunkCondition, manifest: BackendManifest) -> ChunkCondition:
    """``cond`` with what the backend cannot draw degraded, never refused: an action it lacks becomes its
    declared fallback (or ``idle``), an emotion it lacks becomes its first (neutral) one."""
    vocab = manifest.vocabulary
    actions = {a.name for a in vocab.actions}
    changes: dict[str, str] = {}
    if cond.action not in actions:
        changes["action"] = manifest.fallbacks.get(cond.action, "idle")
    if cond.emotion not in vocab.emotions:
        changes["emotion"] = vocab.emotions[0]
    return msgspec.structs.replace(cond, **changes) if changes else cond


def check_fallbacks(vocabulary: Manifest, fallbacks: dict[str, str]) -> None:
    """``ValueError`` unless every fallback names an action of ``vocabulary`` (and idle is one of them)."""
    actions = {a.name for a in vocabulary.actions}
    if "idle" not in actions:
        raise ValueError("a backend's vocabulary needs an 'idle' action (what unknown actions draw)")
    wrong = sorted(f"{k} -> {v}" for k, v in fallbacks.items() if v not in actions)
    if wrong:
        raise ValueError(f"fallbacks to actions the backend lacks: {', '.join(wrong)}")


def percentile_ms(seconds: list[float], q: float) -> float:
    """The q-th percentile of durations in seconds, in milliseconds (rounded to 0.1 ms)."""
    return round(1000.0 * float(np.percentile(seconds, q)), 1)
