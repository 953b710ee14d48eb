"""A real server on loopback for a test, and a wait for server state that has no event of its own."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

from server.app import OnstageServer
from server.limits import Limits
from server.sessions import SessionFactory


@contextlib.asynccontextmanager
async def serving(factory: SessionFactory, limits: Limits) -> AsyncIterator[tuple[OnstageServer, str]]:
    """An ``OnstageServer`` with ``limits`` on a free loopback port; yields it and its session URL."""
    srv = OnstageServer(factory, limits)
    await srv.start("127.0.0.1", 0)
    try:
        yield srv, f"ws://127.0.0.1:{srv.port}/v1/session"
    finally:
        await srv.close()


async def until(predicate: Callable[[], object], timeout: float = 10.0) -> None:
    """Wait for ``predicate()`` to hold, checking every loop turn or so."""
    async with asyncio.timeout(timeout):
        while not predicate():  # noqa: ASYNC110 (polls server state that has no event of its own)
            await asyncio.sleep(0.01)
