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
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from typing import Protocol

import msgspec

from .backend import Backend, BackendManifest
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
    it was opened with, and the chunk its generator makes next (the picture goes on from there)."""

    worker: GeneratorWorker
    note: bytes
    next_chunk: int


class WorkerPool(Protocol):
    """Opens a generator worker per session."""

    @property
    def manifest(self) -> BackendManifest:
        """What the pool's backend declares (the same for every worker it opens)."""
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


class LocalWorkers:
    """Every session's worker in this process, on its own thread, over one loaded backend (the default:
    capacity is the server's ``max_sessions``). No other front end can reach them: nothing to claim."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    @property
    def manifest(self) -> BackendManifest:
        return self.backend.manifest

    async def open(
        self, *, identity: int, seed: int, name: str, resumable: Resumable | None = None
    ) -> GeneratorWorker:
        # Opened (prefilled) in the worker's thread, not on the loop the other sessions share; its
        # errors come with the first call.
        return ModelWorker(self.backend, identity=identity, seed=seed, name=name)

    async def claim(self, name: str, resume_token: str) -> Claimed | None:
        return None

    async def close(self) -> None:
        return None


def _token_hash(resume_token: str) -> bytes:
    return hashlib.sha256(resume_token.encode()).digest()
