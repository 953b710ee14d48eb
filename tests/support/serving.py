"""A real server on loopback for a test (and the limits of one that several tests share), and a wait for
server state that has no event of its own."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import msgspec

from agent.director_config import DirectorConfig
from server.app import OnstageServer
from server.client import SessionClient
from server.limits import Limits
from server.sessions import SessionFactory
from tests.support.llm_server import LLMServer

SHARED_SERVER_LIMITS = Limits(admission="ceiling", max_sessions=6, resume_grace_s=0.5)
"""The limits of an in-process server that the tests of a module (or a package) share: room for the
sessions of earlier tests that still wait out their resume grace."""


@contextlib.asynccontextmanager
async def serving(factory: SessionFactory, limits: Limits) -> AsyncIterator[tuple[OnstageServer, str]]:
    """An ``OnstageServer`` with ``limits`` on a free loopback port; yields it and its session URL."""
    srv = OnstageServer(factory, limits)
    await srv.start("127.0.0.1", 0)
    try:
        yield srv, f"ws://127.0.0.1:{srv.port}/v1/session"
    finally:
        await srv.close()


def directed(factory: SessionFactory, llm: LLMServer, **settings: Any) -> SessionFactory:
    """``factory``'s backend, voice and hearing with an LLM Director at ``llm`` (a short debounce, so a test's
    input reaches the model at once); ``settings`` override the Director's other fields."""
    director = DirectorConfig(base_url=llm.base_url, api_key="test", model="test-model", debounce_s=0.05)
    director = msgspec.structs.replace(director, **settings)
    return SessionFactory(factory.backend, factory.voice, factory.hearing, director=director)


async def until(predicate: Callable[[], object], timeout: float = 10.0) -> None:
    """Wait for ``predicate()`` to hold, checking every loop turn or so."""
    async with asyncio.timeout(timeout):
        while not predicate():  # noqa: ASYNC110 (polls server state that has no event of its own)
            await asyncio.sleep(0.01)


async def starts_at_once(
    stack: contextlib.AsyncExitStack, url: str, starts: list[dict[str, Any]]
) -> tuple[list[SessionClient], list[RuntimeError]]:
    """A storm: a client connected (closed with ``stack``) for each of ``starts``, then every
    ``session.start`` sent at once; the clients admitted and the refusals."""
    clients = [await stack.enter_async_context(SessionClient(url)) for _ in starts]
    answers = await asyncio.gather(
        *(c.start(**fields) for c, fields in zip(clients, starts, strict=True)), return_exceptions=True
    )
    admitted = [c for c, a in zip(clients, answers, strict=True) if isinstance(a, dict)]
    refused = [a for a in answers if isinstance(a, RuntimeError)]
    return admitted, refused
