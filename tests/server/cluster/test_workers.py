"""Remote workers interrupted and killed: an interrupt lands mid-generation on a slot; a killed worker
costs its session a short freeze, on the other node, and the picture continues exactly; a front end that
joins while a slot restarts waits until it is back."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import time

import pytest

pytest.importorskip("ray")

import ray
from ray.actor import ActorHandle
from ray.cluster_utils import Cluster

from server.app import OnstageServer
from server.client import SessionClient
from server.cluster.remote import RaySlots, RemoteWorker
from server.cluster.slot import GeneratorSlot
from server.media import encode_frames
from streaming_model.condition import ChunkCondition
from streaming_model.worker import Cancel
from tests.server.cluster.front_ends import LEASE_S, front_end, until_no_sessions, url_of

pytestmark = pytest.mark.asyncio(loop_scope="package")


async def test_an_interrupt_lands_mid_generation_on_a_remote_worker(cluster: Cluster) -> None:
    # A slot of its own with chunks long enough (24 frames of 512x512) to be caught while generating.
    options = {"chunk_frames": "24", "width": "512", "height": "512"}
    actor = GeneratorSlot.options(num_cpus=0).remote("world", options, 1, 1, 4)  # type: ignore[attr-defined]
    try:
        manifest = await actor.manifest.remote()
        node, _ = await actor.where.remote()
        pool = RaySlots([(actor, node)], manifest, owns_ray=False)
        worker = await pool.open(identity=0, seed=1, name="s")
        cond = ChunkCondition(action="wave", audio=(0.0,) * 24)
        finish = encode_frames
        assert len(await worker.produce(cond, Cancel(), finish) or []) == 24
        before = await worker.capture()
        cancel = Cancel()
        job = asyncio.ensure_future(worker.produce(cond, cancel, finish))
        deadline = time.monotonic() + 30
        while await actor.generating.remote() != ("s", 1):  # the second chunk call is being generated
            assert not job.done() and time.monotonic() < deadline
        cancel.set()
        assert await job is None  # stopped mid-chunk: nothing finished, nothing committed
        assert await worker.capture() == before
        assert await actor.generating.remote() is None
        # The session goes on from where it was: the next chunk is the one the cancelled call would have made.
        after = await worker.produce(cond, Cancel(), finish)
        assert after is not None and len(after) == 24
        await worker.close()
        assert await actor.reserve.remote("t", "another front end", LEASE_S)  # closing freed its place
        await pool.close()
    finally:
        ray.kill(actor)


async def test_a_killed_worker_costs_its_session_a_short_freeze_and_the_picture_continues_exactly(
    url: str, ray_server: OnstageServer, slots: RaySlots
) -> None:
    # The same seed in-process, no input: what the picture must be, frame for frame, across the move.
    async with SessionClient(url) as ref:
        await ref.start(seed=31)
        await ref.wait_frame(lambda f: f.header["chunk"] >= 30, timeout=90)
        reference = {(f.header["chunk"], f.header["frame"]): f.jpeg for f in ref.received.video}
    async with SessionClient(url_of(ray_server)) as client:
        started = await client.start(seed=31)
        worker = ray_server.sessions[started["session_id"]].conductor.worker
        assert isinstance(worker, RemoteWorker)
        first = worker.node
        await client.wait_frame(lambda f: f.header["chunk"] >= 10, timeout=60)
        _, pid = await worker.slot.where.remote()
        killed = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        moved = await client.wait_type("generator.moved", timeout=60)
        told_ms = 1000 * (next(t for t, m in client.received.messages if m is moved) - killed)
        assert moved["exact"] is True and moved["gen_chunk"] >= 10
        assert worker.node != first  # the session's generator is on the other node now
        end = moved["gen_chunk"] + 8
        await client.wait_frame(lambda f: f.header["chunk"] >= end, timeout=60)
        got = {(f.header["chunk"], f.header["frame"]): f.jpeg for f in client.received.video}
        arrivals = [f.t for f in client.received.video]
    assert all(got[key] == reference[key] for key in got if key[0] < 30)  # exactly the same picture
    assert {c for c, _ in got if moved["gen_chunk"] <= c < end} == set(range(moved["gen_chunk"], end))
    gap_ms = 1000 * max(b - a for a, b in itertools.pairwise(arrivals))
    print(
        f"\nmoved at chunk {moved['gen_chunk']}: frozen {moved['frozen_ms']} ms, told {told_ms:.0f} ms after"
        f" the kill, largest frame gap {gap_ms:.0f} ms"
    )
    await until_no_sessions(ray_server)


async def pid_when_up(slot: ActorHandle, timeout: float = 60.0) -> tuple[str, int]:
    """The slot's node and process, once it answers (a killed slot is restarting meanwhile)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            node, pid = await slot.where.remote()
            return node, pid
        except ray.exceptions.ActorUnavailableError:
            assert time.monotonic() < deadline, "the slot did not come back"
            await asyncio.sleep(0.1)


async def test_a_front_end_joining_while_a_slot_restarts_waits_until_it_is_back(
    slots: RaySlots, cluster: Cluster
) -> None:
    slot, _ = slots.slots[0]
    _, pid = await pid_when_up(slot)  # (it may still be coming back from an earlier test's kill)
    os.kill(pid, signal.SIGKILL)  # no session on it: the slot comes back empty, in a new process
    joined = await front_end(cluster)  # asks every slot where it is while this one restarts
    try:
        assert len(joined.slots) == len(slots.slots)
        assert (await slot.where.remote())[1] != pid
    finally:
        await joined.close()
