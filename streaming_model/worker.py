"""Run a session off the event loop: one dedicated thread owns the session and does all torch work.

    worker = SessionWorker(Generator.load(), threads=1, identity=2, seed=7)
    pending = await worker.generate(cond)      # None if interrupted
    frames = await worker.commit(pending)
    worker.interrupt()                          # from any thread or the loop: stops the chunk in flight

torch's intra-op thread count is process-wide; the worker sets it once when it starts.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np
import torch

from .condition import ChunkCondition
from .runtime import Generator, PendingChunk, Session, SessionSnapshot

T = TypeVar("T")


class SessionWorker:
    """A Session behind a single worker thread, with awaitable calls and an interrupt."""

    def __init__(self, generator: Generator, threads: int = 1, **session_kwargs: Any) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="onstage-generator")
        self._cancel = threading.Event()
        self._session: Session = self._pool.submit(self._open, generator, threads, session_kwargs).result()

    @staticmethod
    def _open(generator: Generator, threads: int, kwargs: dict[str, Any]) -> Session:
        torch.set_num_threads(threads)
        return generator.open_session(**kwargs)

    def _submit(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        fut: Future[T] = self._pool.submit(fn, *args)
        return asyncio.wrap_future(fut)

    def _generate(self, cond: ChunkCondition) -> PendingChunk | None:
        self._cancel.clear()  # an interrupt applies to the chunk in flight, not to later ones
        return self._session.generate(cond, cancel=self._cancel)

    async def generate(self, cond: ChunkCondition) -> PendingChunk | None:
        """Denoise the next chunk; None when interrupt() arrived before it finished."""
        return await self._submit(self._generate, cond)

    def interrupt(self) -> None:
        """Stop the chunk being generated at the next denoise-step (or block) boundary."""
        self._cancel.set()

    async def commit(self, pending: PendingChunk) -> np.ndarray:
        """Commit and decode: (4, 128, 128, 3) uint8 frames."""
        return await self._submit(self._session.commit, pending)

    async def rollback(self, k: int) -> None:
        """Forget the last k committed chunks."""
        await self._submit(self._session.rollback, k)

    async def snapshot(self) -> SessionSnapshot:
        """The session's committed state."""
        return await self._submit(self._session.snapshot)

    async def restore(self, snap: SessionSnapshot) -> None:
        """Continue from a snapshot."""
        await self._submit(self._session.restore, snap)

    @property
    def index(self) -> int:
        """The next chunk's index."""
        return self._session.index

    def close(self) -> None:
        """Stop the worker thread (after the call in flight)."""
        self._cancel.set()
        self._pool.shutdown(wait=True)
