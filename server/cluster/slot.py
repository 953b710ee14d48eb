"""A generator slot: a Ray actor that loads the backend once and serves the sessions reserved on it.

    slot = GeneratorSlot.options(resources={"onstage_slot": 1}).remote("tiny", {}, 1, 1, 4)
    ok = await slot.reserve.remote("ab12")                     # False: the slot is full
    await slot.open.remote("ab12", identity=2, seed=7)
    jpegs, finish_s = await slot.produce.remote("ab12", 0, cond, finish)
    slot.cancel.remote("ab12", 0)                               # lands while produce runs
    index, state = await slot.saved.remote("ab12", -1)          # the latest saved state, or None
    await other_slot.adopt.remote("ab12", 2, 7, state, conds)   # continue it there

Chunk calls (open, produce, replace, capture, restore, close) take turns on the actor's one default
thread, as a device serves one chunk at a time, and run the model worker's own steps
(``streaming_model.worker``); ``finish`` runs here, so encoded pictures travel, not arrays. Reservations,
cancels and questions (``reserve``, ``release``, ``cancel``, ``held``, ``generating``, ``where``, ``manifest``) run in
the ``control`` concurrency group, so a cancel reaches a chunk mid-generation. A cancel may arrive before
its call starts (it is kept for it) or after it ended (then it is dropped when that session's next call
comes).

Saved states, for a session to survive its slot's death: every ``snapshot_every`` chunks, as a ``produce``
begins (every chunk before it is final then: only the last committed chunk is ever replaced, and never
once the next is being made), the session is snapshotted (a copy, well under a millisecond) and the
snapshot is exported to bytes on a thread of its own, off the chunk's way. The front end fetches them
(``saved``) and, if this actor dies, has another slot ``adopt`` the session: the saved state, then the
chunks committed since, regenerated under their conditions.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np
import ray
import torch

from streaming_model.backend import BackendManifest, BackendSession
from streaming_model.backends import open_backend
from streaming_model.condition import ChunkCondition
from streaming_model.worker import produce_chunk, replace_chunk, restore_into

T = TypeVar("T")


@ray.remote(concurrency_groups={"control": 2})  # type: ignore[call-overload]  # (missing from its stubs)
class GeneratorSlot:
    """One slot: the backend, and the sessions of the front ends that reserved it."""

    def __init__(
        self, backend: str, options: dict[str, str], sessions: int, threads: int, snapshot_every: int
    ) -> None:
        torch.set_num_threads(threads)
        self._backend = open_backend(backend, options)
        self._capacity = sessions
        self._every = snapshot_every
        self._exporter = ThreadPoolExecutor(1, thread_name_prefix="export")
        self._saved: dict[str, Future[tuple[int, bytes]]] = {}
        self._lock = threading.Lock()
        self._reserved: set[str] = set()
        self._sessions: dict[str, BackendSession] = {}
        self._flags: dict[tuple[str, int], threading.Event] = {}
        self._generating: tuple[str, int] | None = None

    # ------------------------------------------------------------------------------ control group

    @ray.method(concurrency_group="control")
    def manifest(self) -> BackendManifest:
        """What the slot's backend declares (costs as measured at its warm-up, here)."""
        return self._backend.manifest

    @ray.method(concurrency_group="control")
    def where(self) -> tuple[str, int]:
        """The Ray node id and the process id serving this slot."""
        return ray.get_runtime_context().get_node_id(), os.getpid()

    @ray.method(concurrency_group="control")
    def reserve(self, key: str) -> bool:
        """Hold a place for session ``key``; False when the slot serves as many as it may."""
        with self._lock:
            if key in self._reserved:
                return True
            if len(self._reserved) >= self._capacity:
                return False
            self._reserved.add(key)
            return True

    @ray.method(concurrency_group="control")
    def held(self) -> int:
        """Places reserved now (sessions open or being opened)."""
        with self._lock:
            return len(self._reserved)

    @ray.method(concurrency_group="control")
    def release(self, key: str) -> None:
        """Give up a reservation whose session was never opened (an open session frees it on ``close``)."""
        with self._lock:
            if key not in self._sessions:
                self._reserved.discard(key)

    @ray.method(concurrency_group="control")
    def cancel(self, key: str, call: int) -> None:
        """Stop session ``key``'s chunk call ``call`` at the backend's next interrupt point."""
        self._flag(key, call).set()

    @ray.method(concurrency_group="control")
    def saved(self, key: str, newer_than: int) -> tuple[int, bytes] | None:
        """Session ``key``'s latest exported state, (its chunk index, bytes), if newer than ``newer_than``."""
        with self._lock:
            job = self._saved.get(key)
        if job is None or not job.done() or job.exception() is not None:
            return None
        index, state = job.result()
        return (index, state) if index > newer_than else None

    @ray.method(concurrency_group="control")
    def generating(self) -> tuple[str, int] | None:
        """The (session, call) being generated now, if any."""
        return self._generating

    # ------------------------------------------------------------------------------ default group

    def open(self, key: str, identity: int, seed: int, reference: np.ndarray | None = None) -> None:
        """Open (prefill) session ``key``, which must hold a reservation."""
        with self._lock:
            if key not in self._reserved:
                raise ValueError(f"session {key} holds no reservation on this slot")
        session = self._backend.open_session(identity, seed, reference)
        with self._lock:
            self._sessions[key] = session

    def adopt(
        self, key: str, identity: int, seed: int, state: object | None, conds: list[ChunkCondition]
    ) -> None:
        """Take over session ``key`` from a slot that died: open it (it must hold a reservation), restore
        its saved ``state`` (None: it had none, it starts fresh) and regenerate the chunks committed since,
        under their conditions ``conds``; deterministic backends come out exactly where it was."""
        self.open(key, identity, seed)
        session = self._sessions[key]
        if state is not None:
            restore_into(session, state)
        for cond in conds:
            produce_chunk(session, self._backend.manifest, cond, threading.Event(), _discard, deque(maxlen=1))

    def produce(
        self, key: str, call: int, cond: ChunkCondition, finish: Callable[[np.ndarray], T]
    ) -> tuple[T | None, float | None]:
        """``produce_chunk`` for session ``key``: the finished chunk (None if cancelled) and the seconds
        finishing took."""
        session = self._sessions[key]
        if session.index % self._every == 0:
            self._save(key, session)
        return self._chunk(produce_chunk, key, call, cond, finish)

    def replace(
        self, key: str, call: int, cond: ChunkCondition, finish: Callable[[np.ndarray], T]
    ) -> tuple[T | None, float | None]:
        """``replace_chunk`` for session ``key``, as ``produce``."""
        return self._chunk(replace_chunk, key, call, cond, finish)

    def capture(self, key: str) -> bytes:
        """Session ``key``'s committed state as portable bytes (what a story store or another slot takes)."""
        session = self._sessions[key]
        return session.export_state(session.snapshot())

    def restore(self, key: str, state: object) -> int:
        """Continue session ``key`` from a stored state; the chunk index it continues at."""
        session = self._sessions[key]
        restore_into(session, state)
        with self._lock:
            self._saved.pop(key, None)  # of another history
        return session.index

    def close(self, key: str) -> None:
        """Close session ``key`` and free its place. Idempotent."""
        with self._lock:
            session = self._sessions.pop(key, None)
            self._saved.pop(key, None)
            self._reserved.discard(key)
            for flag in [f for f in self._flags if f[0] == key]:
                del self._flags[flag]
        if session is not None:
            session.close()

    # ------------------------------------------------------------------------------ inside

    def _save(self, key: str, session: BackendSession) -> None:
        """Snapshot ``session`` here (a copy) and export it on the export thread."""
        if self._backend.manifest.capabilities.snapshots == "none":
            return
        index, snap = session.index, session.snapshot()
        job = self._exporter.submit(lambda: (index, session.export_state(snap)))
        with self._lock:
            self._saved[key] = job

    def _flag(self, key: str, call: int) -> threading.Event:
        with self._lock:
            return self._flags.setdefault((key, call), threading.Event())

    def _chunk(
        self, step: Callable[..., Any], key: str, call: int, cond: ChunkCondition, finish: Callable[..., T]
    ) -> tuple[T | None, float | None]:
        session = self._sessions[key]
        cancel = self._flag(key, call)
        with self._lock:
            # Cancels that came after their call ended are no longer wanted.
            for old in [f for f in self._flags if f[0] == key and f[1] < call]:
                del self._flags[old]
        took: deque[float] = deque(maxlen=1)
        self._generating = (key, call)
        try:
            out = step(session, self._backend.manifest, cond, cancel, finish, took)
        finally:
            self._generating = None
            with self._lock:
                self._flags.pop((key, call), None)
        return out, (took[0] if took else None)


def _discard(frames: np.ndarray) -> None:
    """A regenerated chunk's frames: nobody sees them again."""
    return None
