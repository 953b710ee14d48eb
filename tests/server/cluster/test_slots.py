"""The slots on the cluster: one generator slot actor per node, placed by its resource; a remote worker
makes the same frames as one in process; a slot serving several sessions makes their chunks in one batch
(and a front end whose slots batch starts its sessions on one grid); sessions spread over both nodes and a
full cluster refuses the next."""

from __future__ import annotations

import asyncio
import io

import numpy as np
import pytest
from PIL import Image

pytest.importorskip("ray")

import ray
from ray.cluster_utils import Cluster

from server.app import OnstageServer
from server.client import SessionClient
from server.cluster.remote import RaySlots, RemoteWorker
from server.cluster.settings import SLOT_RESOURCE
from server.cluster.slot import GeneratorSlot
from server.media import encode_frames
from server.sessions import SessionFactory
from streaming_model.condition import ChunkCondition
from streaming_model.tiny import TinyBackend
from streaming_model.worker import Cancel, ModelWorker
from tests.server.cluster.front_ends import LEASE_S, until_no_sessions, url_of
from tests.support.kernels import alike
from tests.support.slow_finish import held_jpegs

pytestmark = pytest.mark.asyncio(loop_scope="package")


async def test_the_slots_are_placed_one_per_node_by_their_resource(slots: RaySlots, cluster: Cluster) -> None:
    nodes = {node["NodeID"] for node in ray.nodes() if node["Alive"]}
    assert len(nodes) == 2
    assert len(slots.slots) == 2 and {node for _, node in slots.slots} == nodes
    assert ray.available_resources().get(SLOT_RESOURCE, 0) == 0  # each actor holds its node's slot


async def test_the_same_seed_gives_byte_identical_frames_in_process_and_on_a_remote_worker(
    url: str, ray_server: OnstageServer, slots: RaySlots
) -> None:
    runs = []
    for address in (url, url_of(ray_server)):
        async with SessionClient(address) as client:
            started = await client.start(seed=21)
            if address != url:
                worker = ray_server.sessions[started["session_id"]].conductor.worker
                assert isinstance(worker, RemoteWorker) and worker.node in {n for _, n in slots.slots}
            await client.wait_frame(lambda f: f.header["chunk"] >= 16, timeout=60)
            runs.append([f.jpeg for f in client.received.video if f.header["chunk"] < 16])
    assert len(runs[0]) == len(runs[1]) == 64
    assert runs[0] == runs[1]
    await until_no_sessions(ray_server)


def pixels(jpegs: list[bytes]) -> np.ndarray:
    return np.stack([np.asarray(Image.open(io.BytesIO(jpeg)).convert("RGB")) for jpeg in jpegs])


async def test_a_slot_serving_two_sessions_makes_their_chunks_in_one_batch_with_each_sessions_frames(
    cluster: Cluster,
) -> None:
    # A slot of its own (no slot resource: the cluster's are taken), serving three sessions: one holds the
    # slot busy while the other two's chunks come due, so that those wait together.
    slot = GeneratorSlot.options(num_cpus=0).remote("tiny", {}, 3, 1, 4)  # type: ignore[attr-defined]
    seeds = {"a": 31, "b": 32, "holder": 33}
    for key, seed in seeds.items():
        assert await slot.reserve.remote(key, "fe", LEASE_S)
        await slot.open.remote(key, "fe", 0, seed)
    conds = [ChunkCondition(action=("idle", "wave", "nod")[i // 4 % 3]) for i in range(12)]
    made: dict[str, list[list[bytes]]] = {"a": [], "b": []}
    for call, cond in enumerate(conds):
        holding = None
        # Not at call 0: the slot saves a session's state before every 4th chunk it makes (0, 4, 8), and a
        # save is a lane call of its own, so a's and b's saves would queue behind the holder instead of
        # their chunks, which then came one by one (2 runs in 8 failed so).
        if call == 1:
            holding = slot.produce.remote("holder", "fe", call, cond, held_jpegs)
            for _ in range(3000):  # until the holder's chunk is in the slot (then it holds it HOLD_S)
                if await slot.generating.remote() == ("holder", call):
                    break
                await asyncio.sleep(0.01)
            else:
                raise AssertionError("the holder's chunk never reached the slot")
        outs = await asyncio.gather(
            *(slot.produce.remote(key, "fe", call, cond, encode_frames) for key in made)
        )
        for key, (jpegs, _, _) in zip(made, outs, strict=True):
            made[key].append(jpegs)
        if holding is not None:
            await holding
    assert 2 in await slot.batches.remote()  # a and b, queued behind the holder, were made as one batch
    backend = TinyBackend.load()
    # Byte for byte where this machine's batches are exact (bf16 without AMX), else in the last bits only
    exact = backend.manifest.capabilities.batching == "exact"
    for key in made:  # and each is what a session alone in process makes
        alone = ModelWorker(backend, identity=0, seed=seeds[key])
        own: list[list[bytes]] = []
        try:
            for cond in conds:
                jpegs = await alone.produce(cond, Cancel(), encode_frames)
                assert jpegs is not None
                own.append(jpegs)
        finally:
            await alone.close()
        if exact:
            assert made[key] == own
        else:
            # JPEG'd: a last bit can tip a block (0.25-0.37 levels on average here, 12 chunks)
            assert all(alike(pixels(a), pixels(b), exact, 2.0) for a, b in zip(made[key], own, strict=True))
    for key in seeds:
        await slot.close.remote(key, "fe")
    ray.kill(slot)


async def test_a_front_end_whose_slots_batch_starts_its_sessions_on_one_grid(
    factory: SessionFactory, slots: RaySlots
) -> None:
    # The module's slots serve a session each: nothing to batch, so sessions start when they come.
    assert not slots.batching
    assert not SessionFactory(None, factory.voice, factory.hearing, workers=slots).conductor.aligned
    # Slots serving two sessions each, of a backend that batches: sessions start on a shared grid, so
    # that their chunks fall due together and are made as one batch.
    sharing = RaySlots(slots.slots, slots.manifest, owns_ray=False, sessions_per_slot=2)
    assert sharing.batching
    assert SessionFactory(None, factory.voice, factory.hearing, workers=sharing).conductor.aligned


async def test_sessions_spread_over_both_nodes_and_a_full_cluster_refuses_the_next(
    ray_server: OnstageServer,
) -> None:
    async with SessionClient(url_of(ray_server)) as a, SessionClient(url_of(ray_server)) as b:
        ids = [(await a.start(seed=1))["session_id"], (await b.start(seed=2))["session_id"]]
        nodes = {ray_server.sessions[i].conductor.worker.node for i in ids}  # type: ignore[attr-defined]
        assert len(nodes) == 2
        async with SessionClient(url_of(ray_server)) as c:
            await c.send({"type": "session.start", "seed": 3, "ref": "third"})
            error = await c.wait_type("error", timeout=30)
        assert error["code"] == "rate_limited" and error["fatal"] is True and error["ref"] == "third"
        assert "every generator slot is taken (2 in the cluster)" in error["message"]
        assert len(ray_server.sessions) == 2  # the server itself had room: the cluster's slots said no
        await a.wait_frame(lambda f: f.header["chunk"] >= 2, timeout=30)
        await b.wait_frame(lambda f: f.header["chunk"] >= 2, timeout=30)
    # Their resume grace over, the sessions end and free their slots: the next session gets one.
    await until_no_sessions(ray_server)
    async with SessionClient(url_of(ray_server)) as d:
        await d.start(seed=4)
        await d.wait_frame(lambda f: f.header["chunk"] >= 1, timeout=30)
    await until_no_sessions(ray_server)
