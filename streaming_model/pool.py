"""Where sessions get their model workers: in this process by default, or from slots elsewhere.

    pool = LocalWorkers(backend)                              # every session's worker in this process
    worker = await pool.open(identity=2, seed=7, name="ab12")   # NoFreeSlot when none can be had
    await worker.close(); await pool.close()

A pool's ``open`` reserves what serves the session (a slot of a cluster, say) before the session starts,
so a session that would find no generator is refused up front instead of failing later.
``server.cluster.RaySlots`` is the pool of generator slots on a Ray cluster.
"""

from __future__ import annotations

from typing import Protocol

from .backend import Backend, BackendManifest
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


class LocalWorkers:
    """Every session's worker in this process, on its own thread, over one loaded backend (the default:
    capacity is the server's ``max_sessions``)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    @property
    def manifest(self) -> BackendManifest:
        return self.backend.manifest

    async def open(self, *, identity: int, seed: int, name: str) -> GeneratorWorker:
        # Opened (prefilled) in the worker's thread, not on the loop the other sessions share; its
        # errors come with the first call.
        return ModelWorker(self.backend, identity=identity, seed=seed, name=name)

    async def close(self) -> None:
        return None
