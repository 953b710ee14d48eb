"""Admission from measurement, against a real server: sessions are admitted while the generator thread a
new one joins stays under ``generator_busy_max`` (its measured load, or the model's warm-up costs for its
sessions when higher, plus what the newcomer adds); a refusal is a fatal ``rate_limited`` that says why,
with the figures; a storm of starts cannot overfill; a session that leaves makes room again.

And while the machine's cores stay under ``machine_busy_max`` with one more session: every process's CPU,
measured, plus what a session costs; that refusal names the machine's figures. The tests of the
generators' rule leave the machine out (``admission="generators"``): the suite runs beside its servers.

The limits are set from the pool's own figures (the shipped model's costs measured at this run's warm-up),
so what is admitted does not depend on how fast this machine is; a busier machine only measures busier."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator

import pytest

from server.client import SessionClient
from server.limits import Limits
from server.sessions import SessionFactory
from streaming_model.lanes import Lanes
from tests.support.serving import serving, starts_at_once, until

pytestmark = pytest.mark.asyncio(loop_scope="module")


@contextlib.asynccontextmanager
async def on_one_lane(factory: SessionFactory) -> AsyncIterator[tuple[SessionFactory, Lanes]]:
    """``factory``'s models with every session's generator on one batching lane."""
    assert factory.backend is not None
    lanes = Lanes(factory.backend, lanes=1, max_batch=8)
    try:
        batching = SessionFactory(factory.backend, factory.voice, factory.hearing, workers=lanes)
        assert batching.conductor.aligned  # chunks in step, so that they make one batch
        yield batching, lanes
    finally:
        await lanes.close()


async def test_a_session_past_what_the_generator_keeps_real_time_is_refused_saying_why(factory) -> None:
    async with on_one_lane(factory) as (lanes_factory, lanes):
        # Room for one session by the model's own costs, not for a second one.
        assert lanes.load(2).after > lanes.load(1).after
        limit = (lanes.load(1).after + lanes.load(2).after) / 2
        limits = Limits(admission="generators", max_sessions=8, generator_busy_max=limit, resume_grace_s=0.1)
        async with serving(lanes_factory, limits) as (srv, url):
            async with SessionClient(url) as first:
                await first.start(seed=1)
                await first.wait_frame(lambda f: f.header["chunk"] >= 3, timeout=30)
                assert srv.admission.capacity() == 1
                async with SessionClient(url) as second:
                    with pytest.raises(RuntimeError) as refused:
                        await second.start(seed=2)
            message = str(refused.value)
            assert "rate_limited" in message and "'fatal': True" in message
            assert "server at capacity" in message and "busy" in message and f"{limit:.0%}" in message
            assert srv.stats.refused_total == 1
            # The first session gone, a newcomer is admitted.
            await until(lambda: lanes.load(0).sessions == 0, timeout=20)
            async with SessionClient(url) as third:
                await third.start(seed=3)
                await third.wait_frame(lambda f: f.header["chunk"] >= 2, timeout=30)


async def test_a_storm_of_starts_is_admitted_as_far_as_the_costs_allow_and_no_further(factory) -> None:
    async with on_one_lane(factory) as (lanes_factory, lanes):
        # ``fit`` sessions' batched chunks fit, one more does not (halfway between). Two, unless a busy
        # machine timed two batch sizes alike at warm-up: then the first size past which one more costs more.
        fit = next(n for n in range(2, 6) if lanes.load(n + 1).after > lanes.load(n).after)
        limit = (lanes.load(fit).after + lanes.load(fit + 1).after) / 2
        limits = Limits(admission="generators", max_sessions=8, generator_busy_max=limit, resume_grace_s=0.1)
        async with serving(lanes_factory, limits) as (srv, url):
            assert srv.admission.capacity() == fit
            async with contextlib.AsyncExitStack() as stack:
                admitted, refused = await starts_at_once(stack, url, [{"seed": i} for i in range(6)])
                assert len(admitted) == fit and len(refused) == 6 - fit
                assert all("server at capacity" in str(a) for a in refused)
                for client in admitted:
                    await client.wait_frame(lambda f: f.header["chunk"] >= 2, timeout=30)
                assert lanes.load(0).sessions == fit


async def test_an_idle_server_takes_one_session_even_past_its_figures_and_refuses_a_second(factory) -> None:
    async with on_one_lane(factory) as (lanes_factory, lanes):
        # One session alone is past the limit (as on a machine too busy when the costs were measured).
        limit = lanes.load(1).after * 0.5
        limits = Limits(admission="generators", max_sessions=8, generator_busy_max=limit, resume_grace_s=0.1)
        async with serving(lanes_factory, limits) as (srv, url):
            assert srv.admission.capacity() == 1
            async with SessionClient(url) as first:
                await first.start(seed=1)
                await first.wait_frame(lambda f: f.header["chunk"] >= 2, timeout=30)
                async with SessionClient(url) as second:
                    with pytest.raises(RuntimeError) as refused:
                        await second.start(seed=2)
            assert "server at capacity" in str(refused.value)


async def test_a_session_waiting_for_its_client_leaves_room_and_its_resume_is_admitted_like_a_start(
    factory,
) -> None:
    async with on_one_lane(factory) as (lanes_factory, lanes):
        assert lanes.load(2).after > lanes.load(1).after
        limit = (lanes.load(1).after + lanes.load(2).after) / 2  # room for one session, not two
        limits = Limits(admission="generators", max_sessions=8, generator_busy_max=limit, resume_grace_s=120)
        async with serving(lanes_factory, limits) as (srv, url):
            async with SessionClient(url) as first:
                started = await first.start(seed=1)
                seen = await first.wait_frame(lambda f: f.header["chunk"] >= 2, timeout=30)
            resume = {"session_id": started["session_id"], "resume_token": started["resume_token"]}
            # Its client gone, the session pauses: it is not counted, and a newcomer fits.
            await until(lambda: len(srv.waiting()) == 1 and lanes.load(0).sessions == 0, timeout=30)
            async with SessionClient(url) as second:
                await second.start(seed=2)
                await second.wait_frame(lambda f: f.header["chunk"] >= 2, timeout=30)
                async with SessionClient(url) as back:  # no room for the first beside the second
                    with pytest.raises(RuntimeError) as refused:
                        await back.start(resume=resume)
                assert "server at capacity" in str(refused.value)
                assert len(srv.waiting()) == 1  # refused, it goes on waiting
            await until(lambda: lanes.load(0).sessions == 0, timeout=30)
            async with SessionClient(url) as back:
                await back.start(resume=resume)
                frame = await back.wait_frame(lambda f: True, timeout=30)
                assert frame.header["chunk"] > seen.header["chunk"]  # where it paused, not from the start


async def test_a_session_the_machine_has_no_room_for_is_refused_saying_the_machines_figures(factory) -> None:
    async with on_one_lane(factory) as (lanes_factory, lanes):
        # The generators have room; the machine not even for one session's warm-up costs (as on a
        # machine whose cores other processes hold).
        cores = os.cpu_count() or 1
        limit = lanes.load(1).added / cores * 0.9
        limits = Limits(max_sessions=8, generator_busy_max=1.0, machine_busy_max=limit, resume_grace_s=0.1)
        async with serving(lanes_factory, limits) as (srv, url):
            async with SessionClient(url) as first:
                await first.start(seed=1)  # an idle server takes one whatever its figures say
                await first.wait_frame(lambda f: f.header["chunk"] >= 3, timeout=30)
                assert srv.admission.capacity() == 1
                outlook = srv.admission.machine(srv.live_count())
                assert outlook is not None and outlook.after > limit
                # a session costs at least its warm-up costs, and what this server measurably spends on one
                assert outlook.session_cores >= lanes.load(1).added
                assert outlook.load.process <= outlook.load.busy + 0.05
                async with SessionClient(url) as second:
                    with pytest.raises(RuntimeError) as refused:
                        await second.start(seed=2)
            message = str(refused.value)
            assert "rate_limited" in message and "'fatal': True" in message
            assert f"the machine's {cores} cores" in message and f"past the {limit:.0%}" in message
            assert "this server's" in message and "a session costs" in message
            assert srv.stats.refused_total == 1


async def test_what_a_session_cost_the_server_prices_the_next_one_after_it_left(factory) -> None:
    async with on_one_lane(factory) as (lanes_factory, lanes):
        limits = Limits(max_sessions=8, generator_busy_max=1.0, machine_busy_max=1.0, resume_grace_s=0.1)
        async with serving(lanes_factory, limits) as (srv, url):
            assert srv.cpu.session_cores() is None  # no session seen yet
            async with SessionClient(url) as first:
                await first.start(seed=1)
                # one session through a whole window of the watch: what it cost is kept
                await until(lambda: srv.cpu.session_cores() is not None, timeout=60)
            await until(lambda: srv.live_count() == 0 and lanes.load(0).sessions == 0, timeout=30)
            took = srv.cpu.session_cores()
            assert took is not None and took > 0.0
            # Idle again, the server still prices a newcomer at what the last session took.
            outlook = srv.admission.machine(srv.live_count())
            assert outlook is not None and outlook.session_cores >= took
            load = outlook.load
            assert outlook.after * load.cores == pytest.approx(load.busy + outlook.session_cores)


async def test_a_server_admitting_up_to_its_ceiling_refuses_nothing_and_still_measures_the_machine(
    factory,
) -> None:
    async with on_one_lane(factory) as (lanes_factory, lanes):
        # Neither the generator thread nor the machine has room for a second session by these limits.
        limit = lanes.load(1).added / (os.cpu_count() or 1) * 0.9
        limits = Limits(
            admission="ceiling",
            max_sessions=2,
            generator_busy_max=limit,
            machine_busy_max=limit,
            resume_grace_s=0.1,
        )
        async with serving(lanes_factory, limits) as (srv, url):
            async with SessionClient(url) as first, SessionClient(url) as second:
                await first.start(seed=1)
                await first.wait_frame(lambda f: f.header["chunk"] >= 3, timeout=30)
                outlook = srv.admission.machine(srv.live_count())
                assert outlook is not None and outlook.after > limit
                await second.start(seed=2)
                await second.wait_frame(lambda f: f.header["chunk"] >= 2, timeout=30)
                assert srv.admission.capacity() == 2  # the ceiling
                async with SessionClient(url) as third:
                    with pytest.raises(RuntimeError) as refused:
                        await third.start(seed=3)
            assert "2 live sessions is the most it is configured to keep" in str(refused.value)
            assert srv.stats.refused_total == 1
