"""Failover when a front end or a slot dies: a killed ``onstage serve`` frees its slots within its lease
and its session resumes through another front end, picture exact; a session whose worker dies with no
other slot free ends with a fatal ``rate_limited``."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest

pytest.importorskip("ray")

from ray.cluster_utils import Cluster

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
from tests.support.served_process import onstage_serve
from tests.support.voicing import STILL

pytestmark = pytest.mark.asyncio(loop_scope="package")


KILLED_LEASE_S = 3.0
"""The lease of the front end in a process of its own that a test kills: its session must be resumed
elsewhere within it (from the kill, at least three quarters of it), and its other slot is free after it."""


async def test_a_killed_front_end_frees_its_slots_within_its_lease_and_its_session_resumes_elsewhere(
    cluster: Cluster,
    ray_server: OnstageServer,
    slots: RaySlots,
    still_reference: dict[tuple[int, int], bytes],
    tmp_path: Path,
) -> None:
    await until_no_sessions(ray_server)
    config = (
        f'[server.ray]\naddress = "{cluster.address}"\nlease_s = {KILLED_LEASE_S}\n'
        '[server.limits]\nadmission = "ceiling"\n'
    )
    async with onstage_serve(tmp_path / "onstage.toml", config) as (process, url_a):
        async with SessionClient(url_a) as kept, SessionClient(url_a) as left:
            started = await kept.start(seed=43, director="none", plan=STILL, timeout=60)
            await left.start(seed=44, director="none", plan=STILL, timeout=60)
            await kept.wait_frame(lambda f: f.header["gen_chunk"] >= 8, timeout=60)
            assert await slots.held() == 2  # both slots, both front end A's
            process.send_signal(signal.SIGKILL)
            killed = time.monotonic()
            assert await process.wait() == -signal.SIGKILL
    # Front end A is gone without closing anything: its client resumes through this one, which takes the
    # session's generator over; the other session's place lapses with A's lease.
    async with SessionClient(url_of(ray_server)) as back:
        again = await back.start(resume=resume_of(started))
        assert again["session_id"] == started["session_id"]
        resumed_s = time.monotonic() - killed
        took_over_at = (await back.wait_frame(lambda f: True, timeout=60)).header["gen_chunk"]
        assert took_over_at >= 8
        freed_s = None
        while freed_s is None or not back.received.video[-1].header["gen_chunk"] >= took_over_at + 12:
            if freed_s is None and await slots.held() == 1:
                freed_s = time.monotonic() - killed
            assert time.monotonic() - killed < KILLED_LEASE_S + 30, (
                "the killed front end's slot was never freed"
            )
            await asyncio.sleep(0.05)
        assert await slots.held() == 1  # the resumed session's: claimed, it no longer hangs on A's lease
        assert_continues_exactly(back, still_reference, took_over_at, 12)
    print(
        f"\nthe killed front end's session was resumed elsewhere {resumed_s:.2f} s after SIGKILL, its other"
        f" slot was free {freed_s:.2f} s after it (its lease: {KILLED_LEASE_S} s)"
    )
    assert freed_s < KILLED_LEASE_S + 5.0
    await until_no_sessions(ray_server)


async def test_a_failover_with_no_free_slot_ends_the_session_with_a_fatal_rate_limited(
    ray_server: OnstageServer,
) -> None:
    await until_no_sessions(ray_server)
    async with SessionClient(url_of(ray_server)) as lost, SessionClient(url_of(ray_server)) as other:
        started = await lost.start(seed=5)
        await other.start(seed=6)
        await lost.wait_frame(lambda f: f.header["chunk"] >= 2, timeout=60)
        worker = ray_server.sessions[started["session_id"]].conductor.worker
        assert isinstance(worker, RemoteWorker)
        _, pid = await worker.slot.where.remote()
        os.kill(pid, signal.SIGKILL)  # the other slot is taken: the session has nowhere to go
        error = await lost.wait_type("error", timeout=60)
        assert (error["code"], error["fatal"]) == ("rate_limited", True)
        assert (
            "generator worker died and no other generator slot is free (2 in the cluster)" in error["message"]
        )
        assert (await hung_up(lost))[0] == 1011
        assert ray_server.stats.lost_no_slot_total == 1
        assert b"onstage_sessions_lost_no_slot_total 1.0" in ray_server.metrics.exposition()
        # The other session goes on.
        now = other.received.video[-1].header["chunk"]
        await other.wait_frame(lambda f: f.header["chunk"] >= now + 4, timeout=60)
    await until_no_sessions(ray_server)  # the killed slot comes back, empty
