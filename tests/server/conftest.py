"""A real onstage server on loopback, with the shipped models, shared by the server tests of a module."""

from __future__ import annotations

import pytest
import pytest_asyncio

from server.app import OnstageServer
from server.sessions import SessionFactory
from tests.support.serving import SHARED_SERVER_LIMITS, serving


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def server(factory: SessionFactory):
    async with serving(factory, SHARED_SERVER_LIMITS) as (srv, _):
        yield srv


@pytest.fixture
def url(server: OnstageServer) -> str:
    return f"ws://127.0.0.1:{server.port}/v1/session"
