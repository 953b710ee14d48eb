"""The model worker: a backend session behind one thread, so nothing of the model runs on the event loop.

    worker = ModelWorker(backend, identity=2, seed=7)           # opens (prefills) in its thread
    jpegs = await worker.produce(cond, cancel, encode_frames)    # None if cancel came first
    jpegs = await worker.replace(cond, cancel, encode_frames)    # the last chunk again, under cond
    state = await worker.capture(); await worker.restore_state(state)
    await worker.close()

Every call runs in the worker's thread, in the order made, so opening, prefill, snapshots, restores and
state encoding never hold up the loop (nor other sessions' chunks). Conditions pass the backend's
fallbacks first (an action it lacks degrades, never raises mid-call). ``produce`` and ``replace`` finish a
chunk in the same trip to the thread (decode, then the caller's ``finish``, e.g. image encoding), and keep
the time finishing took (``finish_times``): a chunk cannot be interrupted once denoised. The chunk is
committed when the next one is produced (``streaming_model.producer``: frames first, cache after), so a
replacement is a plain regeneration. This worker serves one session on a thread of its own;
``streaming_model.lanes`` serves several on one thread, batching their chunks.

``GeneratorWorker`` is what a session's conductor needs of a worker: this in-process one and a remote one
(``server.cluster``, a Ray actor) are interchangeable behind it. The chunk steps themselves are a
``Producer``'s, so a remote worker runs exactly the same steps in its own process.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

import msgspec
import numpy as np
import torch

from .backend import Backend, BackendManifest, BackendSession
from .busy import BusyMeter
from .condition import ChunkCondition
from .producer import Ahead, Producer
from .runtime import SessionSnapshot

T = TypeVar("T")


class Cancel(threading.Event):
    """A cancel flag that also calls back whoever listens when it is set (a remote worker forwards it to
    the process generating). Set it from any thread; a listener added after it was set runs at once."""

    def __init__(self) -> None:
        super().__init__()
        self._listeners: list[Callable[[], None]] = []
        self._lock = threading.Lock()

    def set(self) -> None:
        with self._lock:
            super().set()
            listeners, self._listeners = self._listeners, []
        for listener in listeners:
            listener()

    def when_set(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` (once) when the flag is set, or now if it is set already."""
        with self._lock:
            if not self.is_set():
                self._listeners.append(listener)
                return
        listener()


class WorkerMoved(msgspec.Struct, frozen=True, kw_only=True):
    """A session's generator moved to another worker because its own died: it went on from generator chunk
    ``gen_chunk`` after a freeze of ``frozen_ms`` (from the failure noticed to the session running again,
    ``replayed`` chunks regenerated from its latest snapshot); ``exact`` when the picture continues exactly
    as it would have (exact snapshots, deterministic backend)."""

    gen_chunk: int
    frozen_ms: float
    replayed: int
    exact: bool


class GeneratorWorker(Protocol):
    """What a session's conductor uses of its model worker, wherever the worker runs.

    ``finish`` runs where the frames are (a remote worker sends it there: a module-level function or a
    ``functools.partial`` of one), so what comes back is its result (JPEG images), not raw arrays."""

    @property
    def manifest(self) -> BackendManifest:
        """The backend's declaration (clock, picture, vocabulary, capabilities, costs)."""
        ...

    @property
    def seed(self) -> int:
        """The session's seed."""
        ...

    @property
    def finish_times(self) -> deque[float]:
        """Seconds recent chunks took from denoised to finished (decode, ``finish``)."""
        ...

    @property
    def commit_times(self) -> deque[float]:
        """Seconds each ``produce`` spent committing the chunk produced before it (0 when none was held):
        the part of a produce that a regeneration of the chunk does not repeat."""
        ...

    on_moved: Callable[[WorkerMoved], None] | None
    """Set by the session: called (on the event loop) when its generator moved to another worker."""

    paused: bool
    """Set by the session while its client is away: it asks for no chunks meanwhile, so its pool does not
    count it in the generators' load (``streaming_model.pool.MeasuredPool``)."""

    @property
    def hands_over(self) -> bool:
        """Whether another front end could take the session over (``streaming_model.pool.Claimed``): then
        the session ``keep``s its minds' notes with the generator."""
        ...

    def keep(self, notes: Mapping[str, bytes]) -> None:
        """Keep ``notes`` (the minds after the decision of the chunk asked for next; a note of a name given
        before replaces it) with the generator state, from the next chunk made on: a front end that takes
        the session over gets the notes of the last chunk made (``Claimed.notes``)."""
        ...

    async def produce(
        self, cond: ChunkCondition, cancel: Cancel, finish: Callable[[np.ndarray], T]
    ) -> T | None:
        """The next chunk under ``cond``, finished (the chunk before it is committed first); None (nothing
        made) if cancelled before it was denoised."""
        ...

    async def replace(
        self, cond: ChunkCondition, cancel: Cancel, finish: Callable[[np.ndarray], T]
    ) -> T | None:
        """The last produced chunk again under ``cond``; None (and that chunk as it was) if cancelled."""
        ...

    @property
    def splices(self) -> bool:
        """Whether ``splice`` can make a chunk again at all (where it cannot, it always declines)."""
        ...

    async def splice(
        self, chunk: int, cond: ChunkCondition, cancel: Cancel, finish: Callable[[np.ndarray], T]
    ) -> T | None:
        """Generator chunk ``chunk`` again under ``cond``, the chunks produced after it forgotten (``produce``
        makes the next one again): a reaction shown in the frames of a chunk already playing. None, and every
        chunk as it was, if cancelled or where the worker cannot splice."""
        ...

    async def foresee(
        self, chunk: int, cond: ChunkCondition, cancel: Cancel, finish: Callable[[np.ndarray], T]
    ) -> tuple[T, Ahead] | None:
        """What ``splice`` would make, with every chunk left as it was (``Producer.foresee``): its frames
        and the splice for ``adopt``. None if cancelled or where the worker cannot splice."""
        ...

    async def adopt(self, ahead: Ahead) -> bool:
        """Make a splice ``foresee`` made the one done, if no chunk before it was made again since."""
        ...

    async def capture(self) -> SessionSnapshot | bytes:
        """The committed state now, for the story store."""
        ...

    async def restore_state(self, state: object) -> None:
        """Continue from a stored state (``SnapshotError`` if it is not one of the backend's)."""
        ...

    async def close(self) -> None:
        """Free the session and what serves it. Idempotent."""
        ...


def timed(finish: Callable[[np.ndarray], T], into: deque[float]) -> Callable[[np.ndarray], T]:
    """``finish`` that appends the seconds each call took to ``into`` (what the caller's finishing, image
    encoding, say, costs a generator thread)."""

    def call(frames: np.ndarray) -> T:
        began = time.perf_counter()
        out = finish(frames)
        into.append(time.perf_counter() - began)
        return out

    return call


class ModelWorker:
    """One backend session on its own thread, with awaitable calls."""

    def __init__(
        self,
        backend: Backend,
        *,
        identity: int | None = None,
        seed: int = 0,
        reference: np.ndarray | None = None,
        threads: int = 1,
        name: str = "model",
    ) -> None:
        self.manifest: BackendManifest = backend.manifest
        self.seed = seed
        self.finish_times: deque[float] = deque(maxlen=200)
        """Seconds each chunk took from denoised to finished (decode, ``finish``)."""
        self.commit_times: deque[float] = deque(maxlen=200)
        """Seconds each produce spent committing the chunk before it."""
        self.on_moved: Callable[[WorkerMoved], None] | None = None
        """Never called: an in-process worker does not move."""
        self.meter = BusyMeter()
        """How busy the worker's thread is (``streaming_model.pool.LocalWorkers.load``)."""
        self.paused = False
        """Set by the session while its client is away (``GeneratorWorker.paused``)."""
        self.callback_times: deque[float] = deque(maxlen=200)
        """Seconds each chunk's ``finish`` (the caller's) took."""
        # torch's intra-op thread count is per process: the generator owns one core by default, the other
        # is left to listening, voice, network and the Director.
        self._pool = ThreadPoolExecutor(
            1, thread_name_prefix=f"gen-{name}", initializer=torch.set_num_threads, initargs=(threads,)
        )
        # Opened in the thread; every later call queues behind it.
        self._opened = self._pool.submit(
            lambda: Producer(backend.open_session(identity, seed, reference), backend.manifest)
        )
        self._closed = False

    hands_over = False
    splices = True
    """No other front end can take over a session in this process."""

    def keep(self, notes: Mapping[str, bytes]) -> None:
        """Nothing to keep: no other front end can take this session over."""

    @property
    def producer(self) -> Producer:
        """The session's chunk steps (waits for it to open: call from the worker's thread or after a
        call)."""
        return self._opened.result()

    @property
    def session(self) -> BackendSession:
        """The backend session (as ``producer``)."""
        return self.producer.session

    @property
    def index(self) -> int:
        """The next chunk's index (chunks produced, the last one included)."""
        return self.producer.index

    @property
    def closed(self) -> bool:
        """Whether ``close`` was called."""
        return self._closed

    def _call(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        return asyncio.wrap_future(self._pool.submit(self._busy, fn, *args))

    def _busy(self, fn: Callable[..., T], *args: Any) -> T:
        with self.meter.busy():
            return fn(*args)

    async def ready(self) -> None:
        """Wait until the session is open (its errors, such as a bad reference, are raised here)."""
        await asyncio.wrap_future(self._opened)

    async def produce(
        self, cond: ChunkCondition, cancel: threading.Event, finish: Callable[[np.ndarray], T]
    ) -> T | None:
        """Commit the last chunk, generate the next and ``finish`` its frames; None (nothing made) when
        ``cancel`` was set before the chunk was denoised."""
        return await self._call(self._produce, cond, cancel, finish)

    async def replace(
        self, cond: ChunkCondition, cancel: threading.Event, finish: Callable[[np.ndarray], T]
    ) -> T | None:
        """Replace the last produced chunk by one generated under ``cond`` (it is not committed yet, so
        this is a plain regeneration); when cancelled, that chunk stands."""
        return await self._call(self._replace, cond, cancel, finish)

    async def splice(
        self, chunk: int, cond: ChunkCondition, cancel: threading.Event, finish: Callable[[np.ndarray], T]
    ) -> T | None:
        """Chunk ``chunk`` again under ``cond``, the ones after it forgotten (``Producer.splice``); when
        cancelled, every chunk stands."""
        return await self._call(self._splice, chunk, cond, cancel, finish)

    async def foresee(
        self, chunk: int, cond: ChunkCondition, cancel: threading.Event, finish: Callable[[np.ndarray], T]
    ) -> tuple[T, Ahead] | None:
        """``splice``'s frames with every chunk left as it was (``Producer.foresee``)."""
        return await self._call(self._foresee, chunk, cond, cancel, finish)

    async def adopt(self, ahead: Ahead) -> bool:
        """Make a splice made ahead the one done, if still valid (``Producer.adopt``)."""
        return await self._call(self.producer.adopt, ahead)

    async def rollback(self, k: int) -> None:
        """Forget the last k chunks produced."""
        await self._call(lambda: self.producer.rollback(k))

    async def snapshot(self) -> object:
        """The session's state, every chunk produced included."""
        return await self._call(lambda: self.producer.snapshot())

    async def restore(self, snap: object) -> None:
        """Continue from a snapshot."""
        await self._call(lambda: self.producer.restore(snap))

    async def capture(self) -> SessionSnapshot | bytes:
        """The committed state now, for the story store: the tiny model's snapshot as it is (the store
        encodes it as its ``snapshot`` rows always were), any other backend's as its portable bytes."""
        return await self._call(self._capture)

    async def restore_state(self, state: object) -> None:
        """Continue from a stored state: the backend's bytes, or a snapshot object (checkpoints of an
        older onstage held the runtime's snapshot). ``SnapshotError`` if it is not one of the backend's."""
        await self._call(self._restore_state, state)

    async def close(self) -> None:
        """Close the session and stop the thread (after the call in flight). Idempotent."""
        if self._closed:
            return
        self._closed = True
        await self._call(self._close)
        await asyncio.to_thread(self._pool.shutdown, wait=True, cancel_futures=True)

    # ------------------------------------------------------------------------------ worker thread

    def _produce(
        self, cond: ChunkCondition, cancel: threading.Event, finish: Callable[[np.ndarray], T]
    ) -> T | None:
        finish = timed(finish, self.callback_times)
        out = self.producer.produce(cond, cancel, finish, self.finish_times)
        self.commit_times.append(self.producer.take_commit_s())
        return out

    def _replace(
        self, cond: ChunkCondition, cancel: threading.Event, finish: Callable[[np.ndarray], T]
    ) -> T | None:
        finish = timed(finish, self.callback_times)
        return self.producer.replace(cond, cancel, finish, self.finish_times)

    def _splice(
        self, chunk: int, cond: ChunkCondition, cancel: threading.Event, finish: Callable[[np.ndarray], T]
    ) -> T | None:
        finish = timed(finish, self.callback_times)
        return self.producer.splice(chunk, cond, cancel, finish, self.finish_times)

    def _foresee(
        self, chunk: int, cond: ChunkCondition, cancel: threading.Event, finish: Callable[[np.ndarray], T]
    ) -> tuple[T, Ahead] | None:
        finish = timed(finish, self.callback_times)
        return self.producer.foresee(chunk, cond, cancel, finish, self.finish_times)

    def _capture(self) -> SessionSnapshot | bytes:
        return self.producer.capture()

    def _close(self) -> None:
        if self._opened.exception() is None:  # done: it ran before this call
            self.producer.close()

    def _restore_state(self, state: object) -> None:
        self.producer.restore_state(state)
