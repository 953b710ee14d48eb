"""A whole session whose Director's endpoint (a real local chat-completions server) answers badly or not
at all: the user is answered every time (speech, or a ``director`` notice and an acknowledgement), and the
picture never stalls while the bad reply is handled."""

from __future__ import annotations

import itertools
import time

import pytest
import pytest_asyncio

from server.app import OnstageServer
from server.client import SessionClient
from server.limits import Limits
from server.sessions import SessionFactory
from tests.support.llm_faults import FAULTS, FaultyEndpoint, outcome
from tests.support.llm_server import LLMServer
from tests.support.serving import directed

pytestmark = pytest.mark.asyncio(loop_scope="module")

HANG_S = 1.5
"""The Director's timeout: a hang lasts this long, so a loop blocked by it would stall the frames as long."""
STALL_S = 1.0
"""No gap between two frames may reach this (24 fps sends one every 42 ms; a stall is seconds)."""


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def endpoint():
    faulty = FaultyEndpoint()
    async with LLMServer(default=faulty) as server:
        yield server, faulty


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def url(endpoint: tuple[LLMServer, FaultyEndpoint], factory: SessionFactory):
    llm, _ = endpoint
    factory = directed(factory, llm, timeout_s=HANG_S, retries=0)
    srv = OnstageServer(factory, Limits(admission="ceiling", max_sessions=2, resume_grace_s=0.2))
    await srv.start("127.0.0.1", 0)
    yield f"ws://127.0.0.1:{srv.port}/v1/session"
    await srv.close()


@pytest.mark.parametrize("kind", list(FAULTS))
async def test_the_user_is_answered_and_the_picture_holds(
    url: str, endpoint: tuple[LLMServer, FaultyEndpoint], kind: str
) -> None:
    llm, faulty = endpoint
    faulty.kind = kind
    async with SessionClient(url) as client:
        await client.start(director="llm", seed=3)
        await client.wait_frame(lambda f: f.header["chunk"] >= 2, timeout=30)
        if kind == "refused":
            await llm.refuse()
        try:
            since = len(client.received.messages)
            sent = await client.send({"type": "input.text", "text": "Hello, can you hear me?"})
            await client.wait_for(
                lambda _: outcome([m for _, m in client.received.messages[since:]]) is not None,
                timeout=30,
                since=since,
            )
        finally:
            await llm.accept()
        answered = time.monotonic()
        await client.wait_frame(lambda f: f.t > answered + 0.5, timeout=30)  # and the picture goes on

    got = outcome([m for _, m in client.received.messages[since:]])
    assert got == FAULTS[kind].outcome
    frames = [f for f in client.received.video if f.t >= sent]
    per_chunk = client.started["chunk_frames"] if client.started else 0
    index = [f.header["chunk"] * per_chunk + f.header["frame"] for f in frames]
    assert index == list(range(index[0], index[-1] + 1))  # every frame sent, none skipped
    largest = max(b.t - a.t for a, b in itertools.pairwise(frames))
    assert largest < STALL_S, f"the picture stalled {largest:.2f} s while the Director handled {kind!r}"
