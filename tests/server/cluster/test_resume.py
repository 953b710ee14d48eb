"""A session resumed through a second front end while the first still streams it: its picture continues
exactly, its minds (the plan's place, the event ids) and its story go with it."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

pytest.importorskip("ray")

from server.app import OnstageServer
from server.client import SessionClient
from server.cluster.remote import RaySlots, RemoteWorker
from tests.server.cluster.front_ends import (
    assert_continues_exactly,
    hung_up,
    resume_of,
    until_no_sessions,
    url_of,
)
from tests.support.voicing import STILL

pytestmark = pytest.mark.asyncio(loop_scope="package")


async def test_a_session_resumed_through_a_second_front_end_continues_its_picture_exactly(
    ray_server: OnstageServer,
    second_front_end: OnstageServer,
    slots: RaySlots,
    still_reference: dict[tuple[int, int], bytes],
) -> None:
    async with SessionClient(url_of(ray_server)) as first:
        started = await first.start(seed=43, director="none", plan=STILL)
        await first.wait_frame(lambda f: f.header["gen_chunk"] >= 8, timeout=60)
        # Front end A still streams to its client; the session is resumed through front end B.
        async with SessionClient(url_of(second_front_end)) as second:
            again = await second.start(resume=resume_of(started))
            assert again["session_id"] == started["session_id"]
            # A's client is closed as for a resume elsewhere, and A lets its session go without freeing it.
            assert await hung_up(first) == (1000, "resumed elsewhere")
            assert not [m for _, m in first.received.messages if m.get("type") == "error"]
            worker = second_front_end.sessions[started["session_id"]].conductor.worker
            assert isinstance(worker, RemoteWorker) and worker.pool is not slots
            # B goes on from the chunk A's generator had reached: the media clock starts afresh, it does not.
            took_over_at = (await second.wait_frame(lambda f: True, timeout=60)).header["gen_chunk"]
            assert took_over_at >= 8
            await second.wait_frame(lambda f: f.header["gen_chunk"] >= took_over_at + 12, timeout=60)
            deadline = time.monotonic() + 30
            while started["session_id"] in ray_server.sessions:
                assert time.monotonic() < deadline, "front end A still holds the session"
                await asyncio.sleep(0.05)
            assert await slots.held() == 1  # B's: A's ending freed nothing
    assert_continues_exactly(second, still_reference, took_over_at, 12)
    await until_no_sessions(second_front_end)
    await until_no_sessions(ray_server)


TWO_LINES: dict[str, Any] = {
    "name": "two lines",
    "idle": {"actions": []},
    "timeline": [
        {"at_s": 0.5, "behaviors": [{"kind": "speech", "id": "first", "text": "First."}]},
        {"at_s": 8.0, "behaviors": [{"kind": "speech", "id": "second", "text": "Second."}]},
    ],
}
"""A plan whose second line comes well after a resume that follows its first (the generator keeps real
time, so that is chunk 48 however slow the machine's wall clock)."""


async def wave(client: SessionClient) -> str:
    """Send a wave; the event id the server gave it."""
    since = len(client.received.messages)
    await client.send({"type": "input.gesture", "gesture": "wave"})
    accepted = await client.wait_for(
        lambda m: m.get("type") == "input.accepted" and m.get("kind") == "gesture", since=since
    )
    return str(accepted["event_id"])


def spoken(client: SessionClient, state: str) -> list[str]:
    return [
        m["text"]
        for _, m in client.received.messages
        if m.get("type") == "character.speech" and m.get("state") == state
    ]


async def test_a_session_resumed_through_a_second_front_end_keeps_its_minds(
    ray_server: OnstageServer, second_front_end: OnstageServer
) -> None:
    async with SessionClient(url_of(ray_server)) as first:
        started = await first.start(seed=45, director="script", plan=TWO_LINES)
        await first.wait_type("character.speech", timeout=60, text="First.", state="ended")
        on_a = await wave(first)
        async with SessionClient(url_of(second_front_end)) as second:
            await second.start(resume=resume_of(started))
            took_over_at = (await second.wait_frame(lambda f: True, timeout=60)).header["gen_chunk"]
            # The plan goes on where it was: its second line at its time, its first not again.
            await second.wait_type("character.speech", timeout=60, text="Second.", state="started")
            assert took_over_at < 48, "the resume came after the second line was due: nothing shown"
            assert "First." not in spoken(second, "started"), second.received.messages
            # Front end B names events under a prefix of its own: never as one front end A named.
            on_b = await wave(second)
            assert on_a.startswith("e") and on_b.startswith("t1e"), (on_a, on_b)
    await until_no_sessions(second_front_end)
    await until_no_sessions(ray_server)


async def test_a_story_session_resumed_through_a_second_front_end_goes_on_with_its_story(
    ray_server: OnstageServer, second_front_end: OnstageServer
) -> None:
    # Each front end has a story store of its own: the story travels with the session's notes.
    async with SessionClient(url_of(ray_server)) as first:
        started = await first.start(story="garden_gate", seed=46, director="script")
        gate = await first.wait_type("story.state", timeout=60, node="gate")
        await first.send({"type": "story.choose", "choice": "wave"})
        porch = await first.wait_type("story.state", timeout=60, node="porch")
        # A few chunks on: their calls carried the story's notes after the move.
        moved_at = max((f.header["gen_chunk"] for f in first.received.video), default=0)
        await first.wait_frame(lambda f: f.header["gen_chunk"] >= moved_at + 4, timeout=60)
        async with SessionClient(url_of(second_front_end)) as second:
            await second.start(resume=resume_of(started))
            here = await second.wait_type("story.state", timeout=60)
            assert (here["node"], here["variables"], here["history"]) == (
                "porch",
                porch["variables"],
                porch["history"],
            )
            # The second front end's store holds the session's checkpoints: a rewind there works.
            await second.send({"type": "story.rewind", "checkpoint": gate["checkpoint"]})
            back = await second.wait_for(
                lambda m: m.get("type") == "story.state" and m["node"] == "gate", timeout=60
            )
            assert back["variables"] == gate["variables"]
            await second.send({"type": "story.choose", "choice": "sneak"})
            await second.wait_for(
                lambda m: m.get("type") == "story.state" and m["node"] == "shed", timeout=60
            )
            assert not [m for _, m in second.received.messages if m.get("type") == "error"]
    await until_no_sessions(second_front_end)
    await until_no_sessions(ray_server)
