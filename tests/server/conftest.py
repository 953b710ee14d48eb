"""A real onstage server on loopback, with the shipped models, shared by the server tests of a module."""

from __future__ import annotations

import pytest
import pytest_asyncio

from server.app import OnstageServer
from server.limits import Limits
from server.sessions import SessionFactory


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def server(factory: SessionFactory):
    # Room for the sessions of earlier tests that still wait out their resume grace.
    srv = OnstageServer(factory, Limits(admission="ceiling", max_sessions=6, resume_grace_s=0.5))
    await srv.start("127.0.0.1", 0)
    yield srv
    await srv.close()


@pytest.fixture
def url(server: OnstageServer) -> str:
    return f"ws://127.0.0.1:{server.port}/v1/session"
