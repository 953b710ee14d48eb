"""Where sessions get their model workers: in this process by default, or from slots elsewhere.

    pool = LocalWorkers(backend)                              # every session's worker in this process
    worker = await pool.open(identity=2, seed=7, name="ab12")   # NoFreeSlot when none can be had
    claimed = await pool.claim("ab12", resume_token)          # another front end's session; None here
    await worker.close(); await pool.close()

A pool's ``open`` reserves what serves the session (a slot of a cluster, say) before the session starts,
so a session that would find no generator is refused up front instead of failing later. Where workers
live outside any one front end (``server.cluster.RaySlots``, the pool of generator slots on a Ray
cluster), a session opened with a ``Resumable`` note can be taken over (``claim``) by another front end
that knows its resume token; the front end that had it then gets ``TakenOver`` from its next call.
``streaming_model.lanes`` is the in-process pool whose threads batch their sessions' chunks.

A pool in this process also says how busy its generator threads are (``MeasuredPool.load``): measured
over the last seconds, and what the backend's warm-up costs predict one more session would add; a
session paused while its client is away is not counted. The
server admits sessions from that, not from a constant (``server.admission``).
"""

from __future__ import annotations

import hashlib
import os
import secrets
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import msgspec

from .backend import Backend, BackendManifest
from .busy import WINDOW_S
from .worker import GeneratorWorker, ModelWorker


class NoFreeSlot(Exception):
    """Every generator slot is taken; the message says so for the client (no inside detail)."""


class TakenOver(Exception):
    """Another front end has taken this session's generator over (a client resumed the session there):
    the worker no longer serves this front end's calls for it."""


class Resumable(msgspec.Struct, frozen=True, kw_only=True):
    """What a pool keeps beside a session so that another front end can take it over: the session's
    ``note`` (its start, opaque to the pool) and a hash of its resume token (never the token itself)."""

    note: bytes
    token_hash: bytes

    @classmethod
    def of(cls, note: bytes, resume_token: str) -> Resumable:
        return cls(note=note, token_hash=_token_hash(resume_token))

    def admits(self, resume_token: str) -> bool:
        """Whether ``resume_token`` is the session's (compared in constant time)."""
        return secrets.compare_digest(_token_hash(resume_token), self.token_hash)


@dataclass(frozen=True)
class Claimed:
    """A session taken over from another front end: its worker (this front end's from now on), the note
    it was opened with, the chunk its generator makes next (the picture goes on from there), and the notes
    the other front end kept with the last chunk made (``GeneratorWorker.keep``: its minds then)."""

    worker: GeneratorWorker
    note: bytes
    next_chunk: int
    notes: Mapping[str, bytes] = field(default_factory=dict)


class WorkerPool(Protocol):
    """Opens a generator worker per session."""

    @property
    def manifest(self) -> BackendManifest:
        """What the pool's backend declares (the same for every worker it opens)."""
        ...

    @property
    def batching(self) -> bool:
        """Whether the pool batches the chunks of sessions that fall due together (then sessions start on a
        shared grid, so that their chunks do)."""
        ...

    async def open(
        self, *, identity: int, seed: int, name: str, resumable: Resumable | None = None
    ) -> GeneratorWorker:
        """A worker with a fresh session for ``identity`` and ``seed`` (prefilled); ``NoFreeSlot`` if none
        can be had now. ``resumable``: kept with the session where other front ends could claim it."""
        ...

    async def claim(self, name: str, resume_token: str) -> Claimed | None:
        """Take over session ``name``, opened with a ``Resumable`` note by another front end, if
        ``resume_token`` is its token; None if the pool knows no such session (or the token is wrong)."""
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

    busy: the share of the threads' time spent on chunks over the last ``window_s`` (or since their
    sessions last changed), measured (the mean over threads). predicted: the share the backend's warm-up
    costs give for these sessions (their chunks in batches as large as the threads make, and the
    finishing of each). after: the busiest thread's share once ``joining`` more sessions joined the
    emptiest threads: what each thread measures now (or its prediction, if higher: sessions that just
    started have not shown their load yet) plus what the newcomers add: what the costs say, times how
    much more than the costs the thread measures. added: what the newcomers add over all threads, in
    cores. ratio: the most that a thread measured over what the costs say for its sessions (1.0: no more,
    or not measured).
    """

    sessions: int
    threads: int
    window_s: float
    busy: float
    predicted: float
    joining: int
    after: float
    added: float
    ratio: float


@runtime_checkable
class MeasuredPool(WorkerPool, Protocol):
    """A pool that measures how busy its generators are (the in-process ones)."""

    def load(self, joining: int = 1) -> GeneratorLoad:
        """The load now, and with ``joining`` more sessions (cheap: call it on the event loop)."""
        ...


def load_of(
    manifest: BackendManifest, threads: list[ThreadLoad], joining: int, ratio: float = 1.0
) -> GeneratorLoad:
    """A pool's ``GeneratorLoad`` from its threads' measurements and the backend's warm-up costs, scaled
    by how much more the threads measure than the costs say (``ratio``: what they last measured, for
    when none measures now); the newcomers join, one by one, the thread with the fewest sessions (the
    least busy of those)."""
    costs, chunk_s = manifest.costs, manifest.vocabulary.chunk_s

    def demand(thread: ThreadLoad, sessions: int) -> float:
        full, rest = divmod(sessions, thread.batch)
        ms = full * costs.batch_ms(thread.batch) + costs.batch_ms(rest)
        return (ms / 1000.0 + sessions * thread.finish_s) / chunk_s

    # Live chunks cost more than the warm-up's (their threads wait for cores and for each other): a
    # thread's sessions and its newcomers cost what the costs say, times what the thread measures over
    # what they say for its sessions, or where it measures nothing yet (its sessions just changed), the
    # largest such ratio of the others (or the last measured). Never less than the costs.
    measured = [t.busy / demand(t, t.sessions) if t.sessions and t.busy else None for t in threads]
    ratio = max((r for r in measured if r is not None), default=ratio)
    scale = [max(1.0, ratio if r is None else r) for r in measured]
    # A thread with no sessions left has nothing to run: what it measured was theirs, not a newcomer's.
    now = [
        max(t.busy, demand(t, t.sessions) * scale[i]) if t.sessions else 0.0 for i, t in enumerate(threads)
    ]
    added = [0] * len(threads)
    for _ in range(joining):
        j = min(range(len(threads)), key=lambda i: (threads[i].sessions + added[i], now[i]))
        added[j] += 1
    after = [
        now[i] + (demand(t, t.sessions + added[i]) - demand(t, t.sessions)) * scale[i]
        for i, t in enumerate(threads)
    ]
    return GeneratorLoad(
        sessions=sum(t.sessions for t in threads),
        threads=len(threads),
        window_s=WINDOW_S,
        busy=sum(t.busy for t in threads) / len(threads),
        predicted=sum(demand(t, t.sessions) for t in threads) / len(threads),
        joining=joining,
        after=max(after),
        added=sum(after) - sum(now),
        ratio=ratio,
    )


class LocalWorkers:
    """Every session's worker in this process, on its own thread, over one loaded backend: the threads
    share the machine's cores, one chunk at a time each (no batching)."""

    def __init__(self, backend: Backend, cores: int | None = None) -> None:
        self.backend = backend
        self.cores = cores or os.cpu_count() or 1
        """The cores the sessions' threads share (what their load is measured against)."""
        self._workers: weakref.WeakSet[ModelWorker] = weakref.WeakSet()

    batching = False
    """Each session on its own thread: nothing to batch."""

    @property
    def manifest(self) -> BackendManifest:
        return self.backend.manifest

    async def open(
        self, *, identity: int, seed: int, name: str, resumable: Resumable | None = None
    ) -> GeneratorWorker:
        # Opened (prefilled) in the worker's thread, not on the loop the other sessions share; its
        # errors come with the first call.
        worker = ModelWorker(self.backend, identity=identity, seed=seed, name=name)
        self._workers.add(worker)
        return worker

    def load(self, joining: int = 1) -> GeneratorLoad:
        """The sessions' threads as if spread evenly over the cores: busy seconds per core-second (sessions
        paused, their client away, not counted)."""
        workers = [w for w in self._workers if not w.closed and not w.paused]
        busy = sum(w.meter.busy_s() for w in workers) / WINDOW_S / self.cores
        finish = [s for w in workers for s in w.callback_times]
        per_core = [len(workers) // self.cores + (i < len(workers) % self.cores) for i in range(self.cores)]
        threads = [ThreadLoad(sessions=n, busy=busy, batch=1, finish_s=median_s(finish)) for n in per_core]
        return load_of(self.manifest, threads, joining)

    async def claim(self, name: str, resume_token: str) -> Claimed | None:
        return None

    async def close(self) -> None:
        return None


def median_s(seconds: Iterable[float]) -> float:
    """The median of durations, 0 for none."""
    values = sorted(seconds)
    return values[len(values) // 2] if values else 0.0


def _token_hash(resume_token: str) -> bytes:
    return hashlib.sha256(resume_token.encode()).digest()
