"""The tiny trained model (``runtime.Generator`` / ``Session``) as a backend: the default one.

Its clock and picture are the shipped model's (24 fps, 4-frame chunks of 128x128); snapshots are exact,
rollback reaches its session's journal, generation stops between transformer blocks, noise is seeded per
(seed, chunk, step) so it is deterministic, and a session may start from a reference picture. Its
exported state is the runtime snapshot's blob (``streaming_model.blobs``), as the story store keeps it.

It batches (``generate_many``, ``decode_many``, ``commit_many``: ``runtime.generate_many``): several
sessions' chunks go through the transformer and the decoder as the rows of one batch. Whether each row's frames are then
byte-identical to the session's alone is checked at warm-up on this machine (``warmup.measure_batching``):
with bf16 weights on an EPYC with AVX512-BF16 they were, and in fp32 on an AVX2-only EPYC, float or
``linears=int8`` (each chunk's activations quantised with a scale of its own); on a Xeon with AMX (past 128
rows) they are not, and the backend declares ``approximate``.

A session's chunk is written to its cache in the pass that generates the next chunk (``streaming_model.
passes``) where that gives the frames of a separate commit pass bit for bit, also checked at warm-up
(``fusing_is_exact``): so a session's frames never depend on which of the two ran, and a restored snapshot
continues exactly.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

import msgspec
import numpy as np

from . import runtime
from .backend import BackendManifest, BackendSession, Batching, Capabilities, Pending
from .blobs import decode_generator, encode_generator
from .condition import ChunkCondition
from .kernels import KernelsChoice
from .kv_cache import SnapshotError
from .linears import Linears, LinearsChoice, chosen_linears
from .loading import DEFAULT_CODEC_PATH, DIT_PATH
from .manifest import FRAMES_PER_CHUNK
from .passes import CommitPass, PendingChunk
from .runtime import Generator, Session, SessionSnapshot
from .sampler import STEPS
from .upsample import Upsample
from .warmup import WARMUP_ACTIONS, measure_batching, measure_costs

JOURNAL = 8
"""Committed chunks a session can roll back."""
MAX_BATCH = 8
"""The largest batch measured at warm-up (a model worker may batch more; its costs are extrapolated)."""


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

    def decode(self, pending: Pending) -> np.ndarray:
        """The chunk's pixels, (4, 128, 128, 3) uint8 (from its latent and voice only: the cache is not read)."""
        return self.session.decode(_chunk(pending))

    def commit(self, pending: Pending) -> None:
        """Write the chunk into the cache (the commit pass); no decoding."""
        self.session.commit(_chunk(pending), decode=False)

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
        self,
        generator: Generator,
        steps: int = STEPS,
        warmup_chunks: int = 4,
        linears: LinearsChoice = "auto",
        max_batch: int = MAX_BATCH,
        commit_pass: CommitPass = "fused",
    ) -> None:
        """``max_batch``: the largest batch measured at warm-up; below 2 the backend does not batch.
        ``commit_pass``: ``fused`` (where ``fusing_is_exact``; else ``apart``) or ``apart``. ``linears``:
        ``auto`` (int8 where the machine computes in fp32), ``float`` or ``int8`` (``streaming_model.linears``;
        ``self.linears`` is what was chosen)."""
        if not 1 <= steps <= 64:
            raise ValueError(f"steps must be in [1, 64], got {steps}")
        self.generator, self.steps = generator, steps
        self.linears = chosen_linears(linears)
        generator.dit_for(self.linears)  # quantised here, at warm-up, not in a session's first chunk
        fused = commit_pass == "fused" and fusing_is_exact(generator, steps, self.linears)
        self.commit_pass: CommitPass = "fused" if fused else "apart"
        costs = measure_costs(self.open_session(identity=0, seed=0), warmup_chunks)
        batching: Batching = "none"
        if max_batch >= 2:
            batching, batch_p50 = measure_batching(self, max_batch, max(3, warmup_chunks // 2))
            costs = msgspec.structs.replace(costs, batch_p50_ms=batch_p50)
        capabilities = Capabilities(
            rollback_depth=JOURNAL,
            snapshots="exact",
            interrupt="block",
            deterministic=True,
            reference_image=True,
            batching=batching,
        )
        self._manifest = BackendManifest(
            name="tiny",
            vocabulary=generator.vocabulary,
            first_chunk_frames=FRAMES_PER_CHUNK,
            audio_rate=0,
            capabilities=capabilities,
            costs=costs,
        )

    @classmethod
    def load(
        cls,
        steps: int = STEPS,
        linears: LinearsChoice = "auto",
        max_batch: int = MAX_BATCH,
        commit_pass: CommitPass = "fused",
        dit: Path = DIT_PATH,
        codec: Path = DEFAULT_CODEC_PATH,
        upsample: Upsample = "parity",
        kernels: KernelsChoice = "auto",
    ) -> TinyBackend:
        """The shipped weights, or the ``dit`` and ``codec`` files given (``WeightsError`` if missing or
        corrupt), warmed up; ``upsample``: how the decoder's output layer computes
        (``streaming_model.upsample``); ``kernels``: what the transformer's attention and MLP run on
        (``streaming_model.kernels``)."""
        return cls(
            Generator.load(dit, codec, upsample, kernels),
            steps,
            linears=linears,
            max_batch=max_batch,
            commit_pass=commit_pass,
        )

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
                identity,
                reference,
                seed,
                steps=self.steps,
                journal=JOURNAL,
                linears=self.linears,
                commit_pass=self.commit_pass,
            )
        )

    def generate_many(
        self,
        sessions: Sequence[BackendSession],
        conds: Sequence[ChunkCondition],
        cancels: Sequence[threading.Event | None],
    ) -> list[Pending | None]:
        """Each session's next chunk, denoised as the rows of one batch (``runtime.generate_many``)."""
        return [*runtime.generate_many([self._own(s) for s in sessions], conds, cancels)]

    def decode_many(
        self, sessions: Sequence[BackendSession], pendings: Sequence[Pending]
    ) -> list[np.ndarray]:
        """The pending chunks' frames, decoded in one batch (``runtime.decode_many``)."""
        for s in sessions:
            self._own(s)
        return runtime.decode_many(self.generator.codec, [_chunk(p) for p in pendings])

    def commit_many(self, sessions: Sequence[BackendSession], pendings: Sequence[Pending]) -> None:
        """Commit each pending chunk to its session in one pass (``runtime.commit_many``)."""
        runtime.commit_many([self._own(s) for s in sessions], [_chunk(p) for p in pendings])

    def _own(self, session: BackendSession) -> Session:
        """The runtime session behind one of this backend's sessions (``ValueError`` for another's)."""
        if not isinstance(session, TinySession) or session.session.dit is not self.generator.dit_for(
            self.linears
        ):
            raise ValueError("a session of another backend cannot join this one's batch")
        return session.session


def fusing_is_exact(generator: Generator, steps: int, linears: Linears, chunks: int = 3) -> bool:
    """Whether a session that commits each chunk in the pass generating the next gives, on this machine,
    the frames of one that commits in a pass of its own, bit for bit. Kernels that sum in another order at
    twice the rows would not (nor would int8 linears with one activation scale per pass: ``linears``)."""

    def frames(commit_pass: CommitPass) -> list[np.ndarray]:
        session = generator.open_session(
            identity=0, seed=0, steps=steps, linears=linears, commit_pass=commit_pass
        )
        return [
            session.step(ChunkCondition(action=action, speaking=True, audio=(0.2, 0.8, 0.2, 0.8)))
            for action in WARMUP_ACTIONS[:chunks]
        ]

    return all(np.array_equal(a, b) for a, b in zip(frames("fused"), frames("apart"), strict=True))


def _chunk(pending: Pending) -> PendingChunk:
    """The tiny model's own pending chunk (``ValueError`` for another backend's)."""
    if not isinstance(pending, PendingChunk):
        raise ValueError("a pending chunk of another backend")
    return pending
