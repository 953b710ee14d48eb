"""Generated chunks that nobody has seen yet are replaced when an urgent event changes their decision."""

from __future__ import annotations

import asyncio
import contextlib
import re
import urllib.request
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from server.app import OnstageServer
from server.client import SessionClient
from server.conductor import ConductorConfig
from server.limits import Limits
from server.sessions import SessionFactory

pytestmark = pytest.mark.asyncio(loop_scope="module")

GESTURES: list[dict[str, object]] = [
    {"gesture": "wave"},
    {"gesture": "thumbs_up"},
    {"gesture": "point", "x": 0.8, "y": 0.0},
    {"gesture": "raise_hand"},
]


@contextlib.asynccontextmanager
async def serving(factory: SessionFactory, config: ConductorConfig) -> AsyncIterator[OnstageServer]:
    """A server on loopback whose sessions run with ``config``."""
    usual = factory.conductor
    factory.conductor = config
    srv = OnstageServer(factory, Limits(max_sessions=2, resume_grace_s=0.2))
    await srv.start("127.0.0.1", 0)
    try:
        yield srv
    finally:
        await srv.close()
        factory.conductor = usual


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def ahead(factory: SessionFactory):
    """A server whose sessions generate 3 chunks ahead: most of each chunk period, a generated chunk waits
    unsent, so inputs land on chunks that are already generated."""
    async with serving(factory, ConductorConfig(lead_chunks=3.0)) as srv:
        yield srv


def replaced_total(server: OnstageServer) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return sum(int(n) for n in re.findall(r"^onstage_session_replaced_total\{[^}]*\} (\d+)$", text, re.M))


async def test_an_input_landing_on_a_generated_unsent_chunk_replaces_it(ahead: OnstageServer) -> None:
    async with SessionClient(f"ws://127.0.0.1:{ahead.port}/v1/session") as client:
        await client.start(seed=2)
        reactions = []
        for i, gesture in enumerate(GESTURES):
            chunk = 4 + 4 * i
            # Right after chunk c's last frame arrived, chunk c + 3 is generated and waits to be sent
            # (generation runs 3 chunks ahead); without replacement, c + 4 would be the first to show it.
            await client.wait_frame(lambda f, c=chunk: (f.header["chunk"], f.header["frame"]) >= (c, 3))
            await asyncio.sleep(0.01 * i)
            ref = f"g{i}"
            sent = await client.send({"type": "input.gesture", "ref": ref, **gesture})
            accepted = await client.wait_type("input.accepted", ref=ref)
            reactions.append((sent, accepted["event_id"], chunk))
        shown = []
        for sent, event_id, chunk in reactions:
            frame = await client.wait_frame(lambda f, e=event_id: e in f.header["reflects"], timeout=10)
            assert frame.t > sent
            shown.append(frame.header["chunk"] - chunk)
        replaced = await asyncio.to_thread(replaced_total, ahead)
    assert replaced >= 3
    assert sorted(shown)[:3] == [3, 3, 3], shown


async def test_with_replacement_off_generated_chunks_are_sent_as_they_are(factory: SessionFactory) -> None:
    async with serving(factory, ConductorConfig(lead_chunks=3.0, replace=False)) as srv:
        async with SessionClient(f"ws://127.0.0.1:{srv.port}/v1/session") as client:
            await client.start(seed=2)
            await client.wait_frame(lambda f: (f.header["chunk"], f.header["frame"]) >= (4, 3))
            await client.send({"type": "input.gesture", "ref": "w", "gesture": "wave"})
            accepted = await client.wait_type("input.accepted", ref="w")
            frame = await client.wait_frame(lambda f: accepted["event_id"] in f.header["reflects"])
            assert frame.header["chunk"] >= 4 + 4  # the next chunk generated after the input
            assert await asyncio.to_thread(replaced_total, srv) == 0


async def test_an_input_during_the_next_chunks_generation_shows_in_that_chunk(
    factory: SessionFactory,
) -> None:
    # Generating one chunk ahead (the default), chunk c + 2 starts generating about 42 ms after chunk c's
    # last frame arrived and takes about 60 ms: inputs 60-90 ms after that frame land while it is denoised
    # or, later, decoded. Either way more than 100 ms are left before it is sent: enough to generate it
    # again with the input.
    async with (
        serving(factory, ConductorConfig()) as srv,
        SessionClient(f"ws://127.0.0.1:{srv.port}/v1/session") as client,
    ):
        await client.start(seed=5)
        for i, delay in enumerate((0.06, 0.07, 0.08, 0.09)):
            chunk = 4 + 4 * i
            await client.wait_frame(lambda f, c=chunk: (f.header["chunk"], f.header["frame"]) >= (c, 3))
            await asyncio.sleep(delay)
            await client.send({"type": "input.gesture", "ref": f"d{i}", **GESTURES[i]})
            accepted = await client.wait_type("input.accepted", ref=f"d{i}")
            frame = await client.wait_frame(lambda f, e=accepted["event_id"]: e in f.header["reflects"])
            assert frame.header["chunk"] == chunk + 2, (delay, frame.header["chunk"] - chunk)
