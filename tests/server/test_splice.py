"""Through a real server on loopback: a client that asks for splices (``session.start`` ``splice``) gets a
reaction from a frame of the chunk playing where a regeneration still reaches one, named in that frame's
``reflects``, once; a client that does not ask gets every reaction from a chunk's first frame. Where on a
real clock an input lands is up to the machine's speed: the exact frame is tested in virtual time, in
tests/server/core/test_splice.py."""

from __future__ import annotations

import asyncio

import pytest

from server.client import SessionClient, VideoFrame
from server.core.conductor import ConductorConfig
from server.sessions import SessionFactory
from tests.server.test_replace import GESTURES, serving
from tests.support.observe import session_metrics

pytestmark = pytest.mark.asyncio(loop_scope="module")

ATTEMPTS = 10
"""Gestures a test sends at most."""


async def gesture_as_a_chunk_begins(
    client: SessionClient, ref: str, gesture: dict
) -> tuple[int, list[VideoFrame]]:
    """Send ``gesture`` as soon as the first frame of a chunk two ahead of the newest has arrived (the rest
    of that chunk still to come); (that chunk, every frame that reflects the gesture, through the chunk after
    the first one that does)."""
    playing = client.received.video[-1].header["chunk"] + 2
    await client.wait_frame(lambda f: f.header["chunk"] >= playing)
    await client.send({"type": "input.gesture", "ref": ref, **gesture})
    accepted = await client.wait_type("input.accepted", ref=ref)
    event = accepted["event_id"]
    shown = await client.wait_frame(lambda f: event in f.header["reflects"], timeout=10)
    await client.wait_frame(lambda f: f.header["chunk"] > shown.header["chunk"] + 1)
    return playing, [f for f in client.received.video if event in f.header["reflects"]]


async def test_a_client_that_asks_gets_reactions_spliced_into_the_chunk_playing(
    factory: SessionFactory,
) -> None:
    async with (
        serving(factory, ConductorConfig()) as srv,
        SessionClient(f"ws://127.0.0.1:{srv.port}/v1/session") as client,
    ):
        started = await client.start(seed=5, splice=True)
        assert started.get("splices") is True
        await client.wait_frame(lambda f: True)
        shown = []
        for i in range(ATTEMPTS):
            playing, frames = await gesture_as_a_chunk_begins(client, f"s{i}", GESTURES[i % len(GESTURES)])
            assert len(frames) == 1, frames  # one frame names it: where its reaction begins
            shown.append((playing, frames[0].header["chunk"], frames[0].header["frame"]))
            if sum(frame > 0 for _, _, frame in shown) >= 3:
                break
        figures = await asyncio.to_thread(session_metrics, srv.port, started["session_id"])
    spliced = [s for s in shown if s[2] > 0]
    # A reaction shows mid-chunk only in the chunk playing when it came (or the one after, had it come as
    # that one was handed over): never later than a chunk's first frame would have.
    assert all(playing <= chunk <= playing + 1 for playing, chunk, _ in spliced), shown
    assert figures["spliced_total"] >= len(spliced)
    # A splice needs the typical chunk time before a frame of the chunk playing, and the chunk after it made
    # again in time: where the machine leaves that room, gestures that come with three of a chunk's frames to
    # go show mid-chunk.
    frame_s, chunk_s = 1 / started["fps"], started["chunk_frames"] / started["fps"]
    if 2 * figures["chunk_seconds0.5"] < chunk_s - 3 * frame_s:
        assert len(spliced) >= 3, (figures, shown)


async def test_a_client_that_does_not_ask_gets_every_reaction_from_a_chunks_first_frame(
    factory: SessionFactory,
) -> None:
    async with (
        serving(factory, ConductorConfig()) as srv,
        SessionClient(f"ws://127.0.0.1:{srv.port}/v1/session") as client,
    ):
        started = await client.start(seed=5)
        assert "splices" not in started  # left out when false, as every default
        await client.wait_frame(lambda f: True)
        for i in range(3):
            _, frames = await gesture_as_a_chunk_begins(client, f"n{i}", GESTURES[i])
            assert [f.header["frame"] for f in frames] == [0]
        figures = await asyncio.to_thread(session_metrics, srv.port, started["session_id"])
    assert figures["spliced_total"] == 0


async def test_a_server_that_does_not_splice_says_so(factory: SessionFactory) -> None:
    async with (
        serving(factory, ConductorConfig(splice=False)) as srv,
        SessionClient(f"ws://127.0.0.1:{srv.port}/v1/session") as client,
    ):
        started = await client.start(seed=5, splice=True)
    assert "splices" not in started
