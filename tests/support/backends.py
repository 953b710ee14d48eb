"""A real backend seen through a recorder: which calls it got, on which thread; optionally with narrower
capabilities declared (what a backend without rollback or exact snapshots looks like to the conductor).

The frames are the wrapped backend's own; only what it declares (and refuses accordingly) is narrowed.
"""

from __future__ import annotations

import threading

import msgspec
import numpy as np

from streaming_model.backend import Backend, BackendManifest, BackendSession, Capabilities, Pending
from streaming_model.condition import ChunkCondition
from streaming_model.kv_cache import RollbackError, SnapshotError

GATE_S = 2.0
"""How long a gated generation waits for its cancel at most."""


class Recording:
    """``backend`` with every session call recorded as (name, thread name); ``capabilities`` replace
    what it declares, and calls beyond them are refused as such a backend would (``RollbackError``,
    ``SnapshotError``). ``hold``: open_session waits for it (a slow prefill). ``gate``: the generation of
    that chunk index sets ``gated`` and waits for its cancel, ``GATE_S`` at most (a chunk in flight for
    as long as a test needs to send it an input)."""

    def __init__(
        self,
        backend: Backend,
        capabilities: Capabilities | None = None,
        hold: threading.Event | None = None,
        gate: int | None = None,
    ) -> None:
        self.backend, self.hold, self.gate = backend, hold, gate
        self.gated = threading.Event()
        self.calls: list[tuple[str, str]] = []
        m = backend.manifest
        self._manifest = m if capabilities is None else msgspec.structs.replace(m, capabilities=capabilities)

    @property
    def manifest(self) -> BackendManifest:
        """The wrapped backend's manifest, with the capabilities given."""
        return self._manifest

    def record(self, name: str) -> None:
        self.calls.append((name, threading.current_thread().name))

    def open_session(
        self, identity: int | None = None, seed: int = 0, reference: np.ndarray | None = None
    ) -> RecordingSession:
        self.record("open_session")
        if self.hold is not None:
            self.hold.wait(30)
        return RecordingSession(self, self.backend.open_session(identity, seed, reference))


class RecordingSession:
    """One recorded session (see ``Recording``)."""

    def __init__(self, owner: Recording, inner: BackendSession) -> None:
        self.owner, self.inner = owner, inner
        self.caps = owner.manifest.capabilities

    @property
    def index(self) -> int:
        return self.inner.index

    @property
    def seed(self) -> int:
        return self.inner.seed

    def generate(self, cond: ChunkCondition, cancel: threading.Event | None = None) -> Pending | None:
        self.owner.record("generate")
        if self.owner.gate == self.inner.index and cancel is not None and not self.owner.gated.is_set():
            self.owner.gated.set()
            cancel.wait(GATE_S)
        return self.inner.generate(cond, cancel)

    def decode(self, pending: Pending) -> np.ndarray:
        self.owner.record("decode")
        return self.inner.decode(pending)

    def commit(self, pending: Pending) -> None:
        self.owner.record("commit")
        self.inner.commit(pending)

    def rollback(self, k: int) -> None:
        self.owner.record("rollback")
        if k > self.caps.rollback_depth:
            raise RollbackError(f"this backend rolls back at most {self.caps.rollback_depth} chunks")
        self.inner.rollback(k)

    def snapshot(self) -> object:
        self.owner.record("snapshot")
        if self.caps.snapshots == "none":
            raise SnapshotError("this backend takes no snapshots")
        return self.inner.snapshot()

    def restore(self, snap: object) -> None:
        self.owner.record("restore")
        self.inner.restore(snap)

    def export_state(self, snap: object) -> bytes:
        self.owner.record("export_state")
        return self.inner.export_state(snap)

    def import_state(self, data: bytes) -> object:
        self.owner.record("import_state")
        return self.inner.import_state(data)

    def close(self) -> None:
        self.owner.record("close")
        self.inner.close()
