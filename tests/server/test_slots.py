"""Session slots: a client that went away leaves its live slot at once, its session pauses while it waits
to be resumed, the waiting are capped (the longest waiting goes first), a storm of starts beyond
capacity is refused clearly while the sessions admitted run, and a session that ended is freed."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import weakref

import pytest

from server.client import SessionClient
from server.limits import Limits
from streaming_model.worker import ModelWorker
from tests.support.serving import serving, starts_at_once, until

pytestmark = pytest.mark.asyncio(loop_scope="module")


def resume_of(started: dict) -> dict:
    return {"session_id": started["session_id"], "resume_token": started["resume_token"]}


async def test_clients_that_drop_do_not_lock_out_a_new_one_and_the_longest_waiting_is_ended(factory) -> None:
    async with serving(
        factory, Limits(admission="ceiling", max_sessions=2, max_waiting_sessions=2, resume_grace_s=60)
    ) as (
        srv,
        url,
    ):
        dropped = []
        for seed in range(4):  # four quick connect-and-drop cycles
            async with SessionClient(url) as client:
                dropped.append(await client.start(seed=seed))
        await until(lambda: len(srv.sessions) == 2)  # the first two were ended to make room
        async with SessionClient(url) as newcomer:
            await newcomer.start(seed=9)  # was refused: four sessions in grace held all the slots
            async with SessionClient(url) as old:
                with pytest.raises(RuntimeError, match="resume_failed"):
                    await old.start(resume=resume_of(dropped[0]))
            async with SessionClient(url) as latest:
                back = await latest.start(resume=resume_of(dropped[-1]))
                assert back["session_id"] == dropped[-1]["session_id"]
                await latest.wait_frame(lambda f: True, timeout=20)


async def test_a_waiting_session_pauses_and_goes_on_from_where_it_was(factory) -> None:
    away_s = 2.0
    async with serving(factory, Limits(max_sessions=1, resume_grace_s=60)) as (srv, url):
        async with SessionClient(url) as first:
            started = await first.start(seed=3)
            await first.wait_frame(lambda f: f.header["chunk"] >= 4, timeout=20)
        last_chunk = first.received.video[-1].header["chunk"]
        live = srv.sessions[started["session_id"]]
        await until(lambda: live.outbox is None)
        sent = live.conductor.chunks_sent
        await asyncio.sleep(away_s)  # the client is away this long: 12 chunks of media clock
        # Paused: past the chunks already made (one handed to the sender, one in flight), nothing more.
        assert live.conductor.chunks_sent <= sent + 2
        async with SessionClient(url) as again:
            await again.start(resume=resume_of(started))
            frame = await again.wait_frame(lambda f: True, timeout=20)
        # It went on from where it paused, not from where the media clock would be had it run on.
        assert last_chunk <= frame.header["chunk"] <= last_chunk + 4


async def test_a_waiting_session_needs_a_free_slot_to_resume_and_keeps_waiting_without_one(factory) -> None:
    async with serving(factory, Limits(max_sessions=1, resume_grace_s=60)) as (srv, url):
        async with SessionClient(url) as first:
            started = await first.start(seed=1)
        async with SessionClient(url) as other:
            await other.start(seed=2)  # the slot the first left is free at once
            async with SessionClient(url) as back:
                with pytest.raises(RuntimeError, match="capacity"):
                    await back.start(resume=resume_of(started))
        await until(lambda: srv.live_count() == 0)
        async with SessionClient(url) as back:
            assert (await back.start(resume=resume_of(started)))["session_id"] == started["session_id"]


async def test_a_storm_of_starts_beyond_capacity_is_refused_and_never_overfills(factory) -> None:
    capacity, storm = 2, 8
    async with serving(factory, Limits(admission="ceiling", max_sessions=capacity, resume_grace_s=60)) as (
        srv,
        url,
    ):
        async with contextlib.AsyncExitStack() as stack:
            # A story session is built over several awaits (its checkpoint store): all arrive at once.
            story = {"story": "garden_gate", "director": "script"}
            admitted, refused = await starts_at_once(stack, url, [story] * storm)
            assert len(admitted) == capacity and len(refused) == storm - capacity
            assert all("capacity" in str(a) and "'fatal': True" in str(a) for a in refused)
            assert len(srv.sessions) == capacity
            for client in admitted:
                await client.wait_frame(lambda f: f.header["chunk"] >= 2, timeout=30)


async def test_a_session_that_ended_is_freed_at_once_not_at_some_later_collection(factory) -> None:
    # Its parts refer to each other: before, only a full cyclic collection freed them, which Python ran
    # rarely (ended sessions piled up, about 11 MiB each). With automatic collection off, only what the
    # server does itself can free the session here.
    gc.disable()
    try:
        async with serving(factory, Limits(max_sessions=1, resume_grace_s=0.1)) as (srv, url):
            async with SessionClient(url) as client:
                started = await client.start(seed=1)
                await client.wait_frame(lambda f: f.header["chunk"] >= 2, timeout=20)
                conductor = weakref.ref(srv.sessions[started["session_id"]].conductor)
                worker = srv.sessions[started["session_id"]].conductor.worker
                assert isinstance(worker, ModelWorker)
                model = weakref.ref(worker.session)
                del worker
            await until(lambda: conductor() is None and model() is None)
    finally:
        gc.enable()
