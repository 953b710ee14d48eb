"""Model workers that serve several sessions each: lanes, one thread apiece, batching what falls due together.

    lanes = Lanes(backend, lanes=2)                            # a WorkerPool (streaming_model.pool)
    worker = await lanes.open(identity=2, seed=7, name="ab12")   # a GeneratorWorker on the emptiest lane
    jpegs = await worker.produce(cond, cancel, encode)           # as a ModelWorker's
    lanes.load()                                                 # how busy the lanes are, measured

A lane runs what its sessions ask in the order they ask. Every ``produce`` waiting when its thread comes
free joins one batch (``BatchingBackend.commit_many`` for the chunks they produced before, then
``generate_many`` and ``decode_many``), at most one per session and
``max_batch`` in all; anything else (opening, replacing, rolling back, snapshots, closing) runs alone
between batches. Nothing waits for company: a lane that is free takes a lone chunk at once, and batches
form when chunks come due while it is busy, which is when batching pays. A session's cancel takes it
out of its batch before the next denoise step (the backend's ``generate_many``); its call still returns
when the batch is done.

Each session keeps its own backend session, so its own cache, seed and chunk index; where the backend
declares ``batching = "exact"``, its frames are byte-identical to a lone worker's
(tests/streaming_model/test_lanes.py).
"""

from __future__ import annotations

import asyncio
import functools
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import torch

from .backend import (
    Backend,
    BackendManifest,
    BackendSession,
    BatchingBackend,
    BatchingChoice,
    apply_fallbacks,
    can_batch,
)
from .busy import BusyMeter
from .condition import ChunkCondition, ConditionError
from .pool import Claimed, GeneratorLoad, LocalWorkers, Resumable, ThreadLoad, load_of, median_s
from .producer import Ahead, Producer, settle_many
from .runtime import SessionSnapshot
from .worker import WorkerMoved, timed

T = TypeVar("T")


@dataclass
class _Produce:
    worker: LaneWorker
    cond: ChunkCondition
    cancel: threading.Event
    finish: Callable[[np.ndarray], Any]
    future: Future[Any]


@dataclass
class _Call:
    worker: LaneWorker
    fn: Callable[[], Any]
    future: Future[Any]


class Lane:
    """One generator thread and the sessions it serves; sessions open (prefill) on a thread of their own
    beside it, so a session joining never holds up the chunks of those already there."""

    def __init__(self, backend: Backend, *, name: str, threads: int, max_batch: int) -> None:
        self.backend = backend
        self.manifest = backend.manifest
        self.batcher: BatchingBackend | None = backend if can_batch(backend) and max_batch > 1 else None
        self.max_batch = max_batch if self.batcher is not None else 1
        self.workers: set[LaneWorker] = set()
        """The sessions on this lane (their number is what ``Lanes.open`` balances)."""
        self.meter = BusyMeter()
        self.batches: deque[int] = deque(maxlen=200)
        """Sizes of the recent batches (1: a chunk alone)."""
        self.finish_s: deque[float] = deque(maxlen=200)
        """Seconds each recent chunk's ``finish`` (the caller's, e.g. image encoding) took."""
        self._jobs: deque[_Produce | _Call | None] = deque()
        self._ready = threading.Condition()
        self._threads = threads
        self.prefill = ThreadPoolExecutor(
            1, thread_name_prefix=f"prefill-{name}", initializer=torch.set_num_threads, initargs=(threads,)
        )
        """Where sessions open (and prefill): apart from the lane's chunks, as the encoders are."""
        self._thread = threading.Thread(target=self._run, name=f"lane-{name}", daemon=True)
        self._thread.start()

    def submit(self, job: _Produce | _Call) -> None:
        """Queue a job (any thread)."""
        with self._ready:
            self._jobs.append(job)
            self._ready.notify()

    def stop(self) -> None:
        """Finish what is queued, then end the threads (blocks until they have)."""
        with self._ready:
            self._jobs.append(None)
            self._ready.notify()
        self._thread.join()
        self.prefill.shutdown()

    # ------------------------------------------------------------------------------ lane thread

    def _run(self) -> None:
        # torch's intra-op threads: one per lane, so that lanes run side by side on their own cores.
        torch.set_num_threads(self._threads)
        while True:
            with self._ready:
                while not self._jobs:
                    self._ready.wait()
                jobs = list(self._jobs)
                self._jobs.clear()
            if None in jobs:
                self._serve([job for job in jobs[: jobs.index(None)] if job is not None])
                return
            self._serve([job for job in jobs if job is not None])

    def _serve(self, jobs: list[_Produce | _Call]) -> None:
        """Run jobs in order, consecutive chunks of different sessions as one batch."""
        batch: list[_Produce] = []
        for job in jobs:
            if not job.future.set_running_or_notify_cancel():
                continue  # its caller went away before it ran
            if isinstance(job, _Produce):
                if len(batch) == self.max_batch or any(j.worker is job.worker for j in batch):
                    self._produce(batch)
                    batch = []
                batch.append(job)
                continue
            self._produce(batch)
            batch = []
            with self.meter.busy():
                _settle(job.future, job.fn)
        self._produce(batch)

    def _produce(self, batch: list[_Produce]) -> None:
        if not batch:
            return
        self.batches.append(len(batch))
        with self.meter.busy():
            if self.batcher is None or len(batch) == 1:
                for job in batch:
                    _settle(job.future, functools.partial(self._alone, job))
            else:
                self._together(self.batcher, batch)

    def _alone(self, job: _Produce) -> Any:
        worker = job.worker
        finish = timed(job.finish, self.finish_s)
        out = worker.producer.produce(job.cond, job.cancel, finish, worker.finish_times)
        worker.commit_times.append(worker.producer.take_commit_s())
        return out

    def _together(self, batcher: BatchingBackend, batch: list[_Produce]) -> None:
        producers = [job.worker.producer for job in batch]
        sessions = [p.session for p in producers]
        try:
            # The chunks they produced before are final now: their commits go first, in one pass.
            settle_many(batcher, producers)
            pendings = batcher.generate_many(
                sessions,
                [apply_fallbacks(job.cond, self.manifest) for job in batch],
                [j.cancel for j in batch],
            )
        except ConditionError:
            # A condition the backend refuses (nothing was generated): each chunk alone, so that the
            # error is its own session's only.
            for job in batch:
                _settle(job.future, functools.partial(self._alone, job))
            return
        except Exception as exc:
            for job in batch:
                job.future.set_exception(exc)
            return
        denoised = time.perf_counter()
        ready = []
        for job, pending in zip(batch, pendings, strict=True):
            job.worker.commit_times.append(job.worker.producer.take_commit_s())
            if pending is None or job.cancel.is_set():
                job.future.set_result(None)  # nothing made, as alone
            else:
                ready.append((job, pending))
        if not ready:
            return
        try:
            frames = batcher.decode_many([job.worker.session for job, _ in ready], [p for _, p in ready])
        except Exception as exc:
            for job, _ in ready:
                job.future.set_exception(exc)
            return
        for (job, pending), chunk in zip(ready, frames, strict=True):
            worker = job.worker
            try:
                out = worker.producer.hold(pending, chunk, job.cancel, timed(job.finish, self.finish_s))
            except Exception as exc:
                job.future.set_exception(exc)
                continue
            # From the batch's denoising: its decode and the finishing of the chunks before this one.
            worker.finish_times.append(time.perf_counter() - denoised)
            job.future.set_result(out)


def _settle(future: Future[Any], fn: Callable[[], Any]) -> None:
    """Run ``fn`` and put its result or exception into ``future``."""
    try:
        future.set_result(fn())
    except BaseException as exc:
        future.set_exception(exc)


class LaneWorker:
    """One session on a lane: a ``GeneratorWorker`` whose calls run in the lane's thread, in order."""

    def __init__(
        self,
        lane: Lane,
        *,
        identity: int | None = None,
        seed: int = 0,
        reference: np.ndarray | None = None,
    ) -> None:
        self.lane = lane
        self.manifest: BackendManifest = lane.manifest
        self.seed = seed
        self.finish_times: deque[float] = deque(maxlen=200)
        """Seconds each chunk took from denoised to finished (its batch's decode, the finishing of the
        chunks before it in the batch, its own ``finish``)."""
        self.commit_times: deque[float] = deque(maxlen=200)
        """Seconds each produce spent committing the chunks produced before (its batch's commit pass)."""
        self.on_moved: Callable[[WorkerMoved], None] | None = None
        """Never called: a session does not leave its lane."""
        self.paused = False
        """Set by the session while its client is away (``GeneratorWorker.paused``)."""
        lane.workers.add(self)
        # Opened beside the lane: its other calls come once it is open (``Lanes.open`` waits for it).
        self._opened = lane.prefill.submit(
            lambda: Producer(lane.backend.open_session(identity, seed, reference), lane.manifest)
        )
        self._closed = False

    hands_over = False
    splices = True
    """No other front end can take over a session in this process."""

    def keep(self, notes: Mapping[str, bytes]) -> None:
        """Nothing to keep: no other front end can take this session over."""

    @property
    def producer(self) -> Producer:
        """The session's chunk steps (waits for it to open: call from the lane's thread or after a call)."""
        return self._opened.result()

    @property
    def session(self) -> BackendSession:
        """The backend session (as ``producer``)."""
        return self.producer.session

    def call(self, fn: Callable[[], T]) -> Future[T]:
        """Run ``fn`` on the lane's thread, alone, after what the lane has queued (any thread)."""
        future: Future[T] = Future()
        self.lane.submit(_Call(self, fn, future))
        return future

    def submit_produce(
        self, cond: ChunkCondition, cancel: threading.Event, finish: Callable[[np.ndarray], T]
    ) -> Future[T | None]:
        """``produce``, for a caller that is not on an event loop (any thread)."""
        future: Future[T | None] = Future()
        self.lane.submit(_Produce(self, cond, cancel, finish, future))
        return future

    def leave(self) -> Future[None]:
        """``close``, for a caller that is not on an event loop: the session closes after the calls queued
        before, and the lane no longer counts it."""
        self._closed = True
        self.lane.workers.discard(self)
        self.lane.meter.restart()
        return self.call(self._close)

    async def _call(self, fn: Callable[[], T]) -> T:
        return await asyncio.wrap_future(self.call(fn))

    async def ready(self) -> None:
        """Wait until the session is open (its errors, such as a bad reference, are raised here)."""
        await asyncio.wrap_future(self._opened)

    async def produce(
        self, cond: ChunkCondition, cancel: threading.Event, finish: Callable[[np.ndarray], T]
    ) -> T | None:
        """The next chunk, finished, batched with the lane's other chunks waiting with it (the chunk before
        it is committed first); None (nothing made) when ``cancel`` was set before it was denoised."""
        return await asyncio.wrap_future(self.submit_produce(cond, cancel, finish))

    async def replace(
        self, cond: ChunkCondition, cancel: threading.Event, finish: Callable[[np.ndarray], T]
    ) -> T | None:
        """The last produced chunk again under ``cond`` (alone); when cancelled, that chunk stands."""
        return await asyncio.wrap_future(self.submit_replace(cond, cancel, finish))

    def submit_replace(
        self, cond: ChunkCondition, cancel: threading.Event, finish: Callable[[np.ndarray], T]
    ) -> Future[T | None]:
        """``replace``, for a caller that is not on an event loop (any thread)."""
        done = timed(finish, self.lane.finish_s)
        return self.call(lambda: self.producer.replace(cond, cancel, done, self.finish_times))

    async def splice(
        self, chunk: int, cond: ChunkCondition, cancel: threading.Event, finish: Callable[[np.ndarray], T]
    ) -> T | None:
        """Chunk ``chunk`` again under ``cond`` (alone, ``Producer.splice``), the ones after it forgotten;
        when cancelled, every chunk stands."""
        done = timed(finish, self.lane.finish_s)
        future = self.call(lambda: self.producer.splice(chunk, cond, cancel, done, self.finish_times))
        return await asyncio.wrap_future(future)

    async def foresee(
        self, chunk: int, cond: ChunkCondition, cancel: threading.Event, finish: Callable[[np.ndarray], T]
    ) -> tuple[T, Ahead] | None:
        """``splice``'s frames (alone) with every chunk left as it was (``Producer.foresee``)."""
        done = timed(finish, self.lane.finish_s)
        future = self.call(lambda: self.producer.foresee(chunk, cond, cancel, done, self.finish_times))
        return await asyncio.wrap_future(future)

    async def adopt(self, ahead: Ahead) -> bool:
        """Make a splice made ahead the one done, if still valid (``Producer.adopt``)."""
        return await self._call(lambda: self.producer.adopt(ahead))

    async def capture(self) -> SessionSnapshot | bytes:
        """The state now (every chunk produced), for the story store."""
        return await self._call(lambda: self.producer.capture())

    async def restore_state(self, state: object) -> None:
        """Continue from a stored state (``SnapshotError`` if it is not one of the backend's)."""
        await self._call(lambda: self.producer.restore_state(state))

    async def close(self) -> None:
        """Close the session (after its call in flight) and leave the lane. Idempotent."""
        if not self._closed:
            await asyncio.wrap_future(self.leave())

    def _close(self) -> None:
        if self._opened.exception() is None:  # (waits for an opening still under way)
            self.producer.close()


class Lanes:
    """Sessions' workers on a few shared generator threads (a ``WorkerPool``): each session joins the lane
    with the fewest sessions; a lane batches its sessions' chunks where the backend batches."""

    def __init__(self, backend: Backend, *, lanes: int = 2, max_batch: int = 8, threads: int = 1) -> None:
        if lanes < 1 or max_batch < 1:
            raise ValueError(f"lanes and max_batch must be at least 1, got {lanes} and {max_batch}")
        self.backend = backend
        self.lanes = [Lane(backend, name=str(i), threads=threads, max_batch=max_batch) for i in range(lanes)]
        self.batching = self.lanes[0].max_batch > 1
        """Whether the lanes batch (the backend batches, and ``max_batch`` allows it)."""
        self._ratio = 1.0  # how much more than the costs a lane last measured (``load_of``)

    @property
    def manifest(self) -> BackendManifest:
        return self.backend.manifest

    def _emptiest(self) -> Lane:
        return min(self.lanes, key=lambda lane: (len(lane.workers), lane.meter.share()))

    async def open(
        self, *, identity: int, seed: int, name: str, resumable: Resumable | None = None
    ) -> LaneWorker:
        """A worker for a new session on the lane with the fewest sessions, open (prefilled beside the
        lane, whose chunks go on meanwhile)."""
        worker = LaneWorker(self._emptiest(), identity=identity, seed=seed)
        try:
            await worker.ready()
        except BaseException:
            await worker.close()
            raise
        worker.lane.meter.restart()  # its chunks begin: the lane's load measured afresh
        return worker

    async def claim(self, name: str, resume_token: str) -> Claimed | None:
        """Nothing to claim: no other front end reaches this process's lanes."""
        return None

    def load(self, joining: int = 1) -> GeneratorLoad:
        """How busy the lanes are, measured, and with ``joining`` more sessions (those paused, their client
        away, not counted)."""
        threads = [
            ThreadLoad(
                sessions=sum(not worker.paused for worker in lane.workers),
                busy=lane.meter.share(),
                batch=lane.max_batch,
                finish_s=median_s(lane.finish_s),
            )
            for lane in self.lanes
        ]
        load = load_of(self.manifest, threads, joining, self._ratio)
        self._ratio = load.ratio
        return load

    async def close(self) -> None:
        """End the lanes' threads (their sessions are closed by their owners first)."""
        for lane in self.lanes:
            await asyncio.to_thread(lane.stop)


def in_process(
    backend: Backend, batching: BatchingChoice = "exact", lanes: int = 0, max_batch: int = 8
) -> Lanes | LocalWorkers:
    """The sessions' workers in this process: lanes that batch where the backend's batches are as exact
    as ``batching`` accepts (``exact``: frames byte-identical to a lone session's; ``approximate``: any
    batches), else a thread per session as before batching (``off``, or a backend that cannot batch so).
    ``lanes``: generator threads (0: one per core)."""
    declared = backend.manifest.capabilities.batching
    if batching == "off" or declared == "none" or (declared == "approximate" and batching == "exact"):
        return LocalWorkers(backend)
    return Lanes(backend, lanes=lanes or os.cpu_count() or 1, max_batch=max_batch)
