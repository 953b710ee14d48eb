"""The tiny trained model (``runtime.Generator`` / ``Session``) as a backend: the default one.

Its clock and picture are the shipped model's (24 fps, 4-frame chunks of 128x128); snapshots are exact,
rollback reaches its session's journal, generation stops between transformer blocks, noise is seeded per
(seed, chunk, step) so it is deterministic, and a session may start from a reference picture. Its
exported state is the runtime snapshot's blob (``streaming_model.blobs``), as the story store keeps it.
"""

from __future__ import annotations

import threading

import numpy as np

from .backend import BackendManifest, Capabilities, Pending
from .blobs import decode_generator, encode_generator
from .condition import ChunkCondition
from .kv_cache import SnapshotError
from .linears import Linears, check_linears
from .manifest import FRAMES_PER_CHUNK, build_manifest
from .runtime import Generator, PendingChunk, Session, SessionSnapshot
from .sampler import STEPS
from .warmup import measure_costs

JOURNAL = 8
"""Committed chunks a session can roll back."""


class TinySession:
    """A runtime session behind the backend protocol."""

    def __init__(self, session: Session) -> None:
        self.session = session

    @property
    def index(self) -> int:
        """The next chunk's index."""
        return self.session.index

    @property
    def seed(self) -> int:
        """The session's seed."""
        return self.session.seed

    def generate(self, cond: ChunkCondition, cancel: threading.Event | None = None) -> PendingChunk | None:
        """Denoise the next chunk (stops between blocks once ``cancel`` is set)."""
        return self.session.generate(cond, cancel)

    def commit(self, pending: Pending) -> np.ndarray:
        """Commit and decode: (4, 128, 128, 3) uint8."""
        if not isinstance(pending, PendingChunk):
            raise ValueError("a pending chunk of another backend")
        return self.session.commit(pending)

    def rollback(self, k: int) -> None:
        """Forget the last k committed chunks."""
        self.session.rollback(k)

    def snapshot(self) -> SessionSnapshot:
        """The committed state (exact)."""
        return self.session.snapshot()

    def restore(self, snap: object) -> None:
        """Continue exactly from a snapshot of a tiny session."""
        if not isinstance(snap, SessionSnapshot):
            raise SnapshotError("not a snapshot of the tiny model")
        self.session.restore(snap)

    def export_state(self, snap: object) -> bytes:
        """The snapshot as a generator blob."""
        if not isinstance(snap, SessionSnapshot):
            raise SnapshotError("not a snapshot of the tiny model")
        return encode_generator(snap)

    def import_state(self, data: bytes) -> SessionSnapshot:
        """The snapshot in a generator blob (``BlobError``, a ``SnapshotError``, if it is not one)."""
        return decode_generator(data)

    def close(self) -> None:
        """Nothing to free beyond what garbage collection does."""


class TinyBackend:
    """The shipped (or any) ``Generator``, warmed up: its costs are measured when it is built."""

    def __init__(
        self, generator: Generator, steps: int = STEPS, warmup_chunks: int = 4, linears: Linears = "float"
    ) -> None:
        if not 1 <= steps <= 64:
            raise ValueError(f"steps must be in [1, 64], got {steps}")
        self.generator, self.steps = generator, steps
        self.linears = check_linears(linears)
        generator.dit_for(self.linears)  # quantised here, at warm-up, not in a session's first chunk
        capabilities = Capabilities(
            rollback_depth=JOURNAL,
            snapshots="exact",
            interrupt="block",
            deterministic=True,
            reference_image=True,
        )
        costs = measure_costs(self.open_session(identity=0, seed=0), warmup_chunks)
        self._manifest = BackendManifest(
            name="tiny",
            vocabulary=build_manifest(),
            first_chunk_frames=FRAMES_PER_CHUNK,
            audio_rate=0,
            capabilities=capabilities,
            costs=costs,
        )

    @classmethod
    def load(cls, steps: int = STEPS, linears: Linears = "float") -> TinyBackend:
        """The shipped weights (``WeightsError`` if missing or corrupt), warmed up."""
        return cls(Generator.load(), steps, linears=linears)

    @property
    def manifest(self) -> BackendManifest:
        """What the tiny model declares."""
        return self._manifest

    def open_session(
        self, identity: int | None = None, seed: int = 0, reference: np.ndarray | None = None
    ) -> TinySession:
        """A session prefilled with a built-in identity or a reference picture (128x128 RGB)."""
        return TinySession(
            self.generator.open_session(
                identity, reference, seed, steps=self.steps, journal=JOURNAL, linears=self.linears
            )
        )
