"""Where sessions get their model workers: in this process by default, or from slots elsewhere.

    pool = LocalWorkers(backend)                              # every session's worker in this process
    worker = await pool.open(identity=2, seed=7, name="ab12")   # NoFreeSlot when none can be had
    await worker.close(); await pool.close()

A pool's ``open`` reserves what serves the session (a slot of a cluster, say) before the session starts,
so a session that would find no generator is refused up front instead of failing later.
``server.cluster.RaySlots`` is the pool of generator slots on a Ray cluster; ``streaming_model.lanes``
the in-process pool whose threads batch their sessions' chunks.

A pool in this process also says how busy its generator threads are (``MeasuredPool.load``): measured
over the last seconds, and what the backend's warm-up costs predict one more session would add. The
server admits sessions from that, not from a constant (``server.admission``).
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Iterable
from typing import Protocol, runtime_checkable

import msgspec

from .backend import Backend, BackendManifest
from .busy import WINDOW_S
from .worker import GeneratorWorker, ModelWorker


class NoFreeSlot(Exception):
    """Every generator slot is taken; the message says so for the client (no inside detail)."""


class WorkerPool(Protocol):
    """Opens a generator worker per session."""

    @property
    def manifest(self) -> BackendManifest:
        """What the pool's backend declares (the same for every worker it opens)."""
        ...

    async def open(self, *, identity: int, seed: int, name: str) -> GeneratorWorker:
        """A worker with a fresh session for ``identity`` and ``seed`` (prefilled); ``NoFreeSlot`` if none
        can be had now."""
        ...

    async def close(self) -> None:
        """Free what the pool holds (its workers' sessions are closed by their owners first)."""
        ...


class ThreadLoad(msgspec.Struct, frozen=True, kw_only=True):
    """One generator thread (or core) and what runs on it: its sessions, the share of the last
    ``WINDOW_S`` it was busy, the largest batch it makes (1: one chunk at a time) and the median seconds
    a chunk's ``finish`` (image encoding) took on it."""

    sessions: int
    busy: float
    batch: int
    finish_s: float


class GeneratorLoad(msgspec.Struct, frozen=True, kw_only=True):
    """How busy a pool's generator threads are and what more sessions would do to them.

    busy: the share of the threads' time spent on chunks over the last ``window_s``, measured (the mean
    over threads). predicted: the share the backend's warm-up costs give for these sessions (their chunks
    in batches as large as the threads make, and the finishing of each). after: the busiest thread's
    share once ``joining`` more sessions joined the emptiest threads: what each thread measures now (or
    its prediction, if higher: sessions that just started have not shown their load yet) plus what the
    costs say the newcomers add.
    """

    sessions: int
    threads: int
    window_s: float
    busy: float
    predicted: float
    joining: int
    after: float


@runtime_checkable
class MeasuredPool(WorkerPool, Protocol):
    """A pool that measures how busy its generators are (the in-process ones)."""

    def load(self, joining: int = 1) -> GeneratorLoad:
        """The load now, and with ``joining`` more sessions (cheap: call it on the event loop)."""
        ...


def load_of(manifest: BackendManifest, threads: list[ThreadLoad], joining: int) -> GeneratorLoad:
    """A pool's ``GeneratorLoad`` from its threads' measurements and the backend's warm-up costs; the
    newcomers join, one by one, the thread with the fewest sessions (the least busy of those)."""
    costs, chunk_s = manifest.costs, manifest.vocabulary.chunk_s

    def demand(thread: ThreadLoad, sessions: int) -> float:
        full, rest = divmod(sessions, thread.batch)
        ms = full * costs.batch_ms(thread.batch) + costs.batch_ms(rest)
        return (ms / 1000.0 + sessions * thread.finish_s) / chunk_s

    now = [max(t.busy, demand(t, t.sessions)) for t in threads]
    added = [0] * len(threads)
    for _ in range(joining):
        j = min(range(len(threads)), key=lambda i: (threads[i].sessions + added[i], now[i]))
        added[j] += 1
    after = [now[i] + demand(t, t.sessions + added[i]) - demand(t, t.sessions) for i, t in enumerate(threads)]
    return GeneratorLoad(
        sessions=sum(t.sessions for t in threads),
        threads=len(threads),
        window_s=WINDOW_S,
        busy=sum(t.busy for t in threads) / len(threads),
        predicted=sum(demand(t, t.sessions) for t in threads) / len(threads),
        joining=joining,
        after=max(after),
    )


class LocalWorkers:
    """Every session's worker in this process, on its own thread, over one loaded backend: the threads
    share the machine's cores, one chunk at a time each (no batching)."""

    def __init__(self, backend: Backend, cores: int | None = None) -> None:
        self.backend = backend
        self.cores = cores or os.cpu_count() or 1
        """The cores the sessions' threads share (what their load is measured against)."""
        self._workers: weakref.WeakSet[ModelWorker] = weakref.WeakSet()

    @property
    def manifest(self) -> BackendManifest:
        return self.backend.manifest

    async def open(self, *, identity: int, seed: int, name: str) -> GeneratorWorker:
        # Opened (prefilled) in the worker's thread, not on the loop the other sessions share; its
        # errors come with the first call.
        worker = ModelWorker(self.backend, identity=identity, seed=seed, name=name)
        self._workers.add(worker)
        return worker

    def load(self, joining: int = 1) -> GeneratorLoad:
        """The sessions' threads as if spread evenly over the cores: busy seconds per core-second."""
        workers = [w for w in self._workers if not w.closed]
        busy = sum(w.meter.busy_s() for w in workers) / WINDOW_S / self.cores
        finish = [s for w in workers for s in w.callback_times]
        per_core = [len(workers) // self.cores + (i < len(workers) % self.cores) for i in range(self.cores)]
        threads = [ThreadLoad(sessions=n, busy=busy, batch=1, finish_s=median_s(finish)) for n in per_core]
        return load_of(self.manifest, threads, joining)

    async def close(self) -> None:
        return None


def median_s(seconds: Iterable[float]) -> float:
    """The median of durations, 0 for none."""
    values = sorted(seconds)
    return values[len(values) // 2] if values else 0.0
