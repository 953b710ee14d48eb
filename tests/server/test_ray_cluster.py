"""Generator workers on Ray: a real two-node Ray cluster on this machine (``ray.cluster_utils.Cluster``,
one ``onstage_slot`` per node), real slot actors with the shipped model, real servers on loopback (two
front ends in this process, and one ``onstage serve`` of its own to be killed) and real clients. Ray
starts once for the module and is shut down at its end."""

from __future__ import annotations

import asyncio
import contextlib
import io
import itertools
import os
import signal
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import pytest_asyncio
from PIL import Image

ray = pytest.importorskip("ray")

from ray.actor import ActorHandle  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

from events.hearing import Hearing  # noqa: E402
from events.transcriber import TranscriberConfig, words  # noqa: E402
from server.app import OnstageServer  # noqa: E402
from server.client import SessionClient  # noqa: E402
from server.cluster.encoders import name_of  # noqa: E402
from server.cluster.remote import NAMESPACE, RaySlots, RemoteWorker  # noqa: E402
from server.cluster.remote_encoders import RemoteTranscriber, RemoteYamNet, shared_voice_and_hearing  # noqa: E402
from server.cluster.settings import ENCODERS_RESOURCE, SLOT_RESOURCE, ClusterSettings  # noqa: E402
from server.cluster.slot import GeneratorSlot  # noqa: E402
from server.limits import Limits  # noqa: E402
from server.media import encode_frames  # noqa: E402
from server.sessions import SessionFactory  # noqa: E402
from server.voice import Voice  # noqa: E402
from streaming_model.condition import ChunkCondition  # noqa: E402
from streaming_model.tiny import TinyBackend  # noqa: E402
from streaming_model.worker import Cancel, ModelWorker  # noqa: E402
from tests.support.kernels import alike  # noqa: E402
from tests.support.microphone import speak_into  # noqa: E402
from tests.support.served_process import onstage_serve  # noqa: E402
from tests.support.serving import serving, until  # noqa: E402
from tests.support.slow_finish import held_jpegs  # noqa: E402
from tests.support.sound_set import SPEECH, clip  # noqa: E402
from tests.support.voicing import STILL  # noqa: E402

pytestmark = pytest.mark.asyncio(loop_scope="module")

NODE: dict[str, Any] = {
    "num_cpus": 1,
    "resources": {SLOT_RESOURCE: 1, ENCODERS_RESOURCE: 1},
    "object_store_memory": 80 * 1024 * 1024,
}


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """Two Ray nodes on this machine, one generator slot and one encoders actor each."""
    nodes = Cluster(initialize_head=True, head_node_args={**NODE, "include_dashboard": False})
    try:
        nodes.add_node(**NODE)
        ray.init(address=nodes.address, namespace="onstage")
        nodes.wait_for_nodes()
        yield nodes
    finally:
        ray.shutdown()
        nodes.shutdown()


LEASE_S = 5.0
"""The front ends' leases in this process: every test longer than this shows that they renew them."""
KILLED_LEASE_S = 3.0
"""The lease of the front end in a process of its own that a test kills: its session must be resumed
elsewhere within it (from the kill, at least three quarters of it), and its other slot is free after it."""
REFERENCE_CHUNKS = 48


async def front_end(cluster: Cluster) -> RaySlots:
    """A front end of its own to the slots (they are found by name: the first made them)."""
    return await asyncio.to_thread(
        RaySlots.connect, ClusterSettings(address="auto", lease_s=LEASE_S), "tiny", {}
    )


@contextlib.asynccontextmanager
async def ray_serving(factory: SessionFactory, slots: RaySlots) -> AsyncIterator[OnstageServer]:
    """A server on loopback whose sessions' generators are ``slots``' (closed with it)."""
    remote = SessionFactory(None, factory.voice, factory.hearing, workers=slots)
    try:
        async with serving(remote, Limits(admission="ceiling", max_sessions=6, resume_grace_s=0.2)) as (
            srv,
            _,
        ):
            yield srv
    finally:
        await slots.close()


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def slots(cluster: Cluster) -> RaySlots:
    return await front_end(cluster)


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def ray_server(factory: SessionFactory, slots: RaySlots) -> AsyncIterator[OnstageServer]:
    async with ray_serving(factory, slots) as srv:
        yield srv


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def second_front_end(factory: SessionFactory, cluster: Cluster) -> AsyncIterator[OnstageServer]:
    async with ray_serving(factory, await front_end(cluster)) as srv:
        yield srv


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def still_reference(server: OnstageServer) -> dict[tuple[int, int], bytes]:
    """Seed 43 with the still plan, in process, no input: each (generator chunk, frame)'s JPEG."""
    async with SessionClient(f"ws://127.0.0.1:{server.port}/v1/session") as ref:
        await ref.start(seed=43, director="none", plan=STILL)
        await ref.wait_frame(lambda f: f.header["gen_chunk"] >= REFERENCE_CHUNKS, timeout=120)
        return {(f.header["gen_chunk"], f.header["frame"]): f.jpeg for f in ref.received.video}


def url_of(srv: OnstageServer) -> str:
    return f"ws://127.0.0.1:{srv.port}/v1/session"


async def until_no_sessions(srv: OnstageServer, timeout: float = 60.0) -> None:
    """Wait for the server to have ended every session (their grace over) and their slots to be free (a
    session leaves the server's books before its worker has closed)."""
    slots = srv.factory.workers
    assert isinstance(slots, RaySlots)
    deadline = time.monotonic() + timeout
    while srv.sessions or await slots.held():
        assert time.monotonic() < deadline, f"sessions still open: {list(srv.sessions)}"
        await asyncio.sleep(0.05)


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


async def hung_up(client: SessionClient, timeout: float = 30.0) -> tuple[int | None, str | None]:
    """Wait for the server to close ``client``'s connection; its close code and reason."""
    assert client.ws is not None
    await asyncio.wait_for(client.ws.wait_closed(), timeout)
    return client.ws.close_code, client.ws.close_reason


def resume_of(started: dict[str, Any]) -> dict[str, str]:
    return {"session_id": started["session_id"], "resume_token": started["resume_token"]}


def assert_continues_exactly(
    client: SessionClient, reference: dict[tuple[int, int], bytes], since: int, chunks: int
) -> None:
    """Every frame ``client`` got of generator chunks ``since`` to ``since + chunks - 1`` is the reference's
    (and at least ``chunks`` // 2 of those chunks came: a loaded machine may drop some media)."""
    got = {
        (f.header["gen_chunk"], f.header["frame"]): f.jpeg
        for f in client.received.video
        if since <= f.header["gen_chunk"] < since + chunks
    }
    assert len({c for c, _ in got}) >= chunks // 2, sorted(got)
    differing = sorted(key for key, jpeg in got.items() if jpeg != reference[key])
    assert not differing, f"frames (gen_chunk, frame) {differing} differ from the same seed's in process"


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


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def shared(cluster: Cluster) -> tuple[Voice, Hearing]:
    """A front end's voice and hearing from the cluster's shared encoders actor."""
    return await asyncio.to_thread(shared_voice_and_hearing, TranscriberConfig(), True)


async def test_the_shared_encoders_hear_and_speak_as_a_front_end_s_own_models(
    factory: SessionFactory, shared: tuple[Voice, Hearing]
) -> None:
    voice, hearing = shared
    text = "Hi! Nice to meet you."
    own = await asyncio.to_thread(factory.voice.synthesize, text)
    for first in (True, False):  # at the video's priority there, and below it
        theirs = await voice.synthesize_async(text, first=first)
        assert np.array_equal(theirs.samples, own.samples) and theirs.words == own.words
    talk = clip(SPEECH[0])
    assert hearing.transcriber is not None and factory.hearing.transcriber is not None
    heard = await asyncio.wrap_future(hearing.transcriber.submit(talk))
    assert (
        words(heard.text)
        and heard.text == (await asyncio.wrap_future(factory.hearing.transcriber.submit(talk))).text
    )
    knock = clip("knock_a")
    assert hearing.yamnet is not None and factory.hearing.yamnet is not None
    scores = await asyncio.to_thread(hearing.yamnet.scores, knock)
    assert np.array_equal(scores, await asyncio.to_thread(factory.hearing.yamnet.scores, knock))
    # The actors serve every front end, found by their names.
    named = ray.get_actor(name_of(1), namespace=NAMESPACE)
    assert await named.labels.remote() == factory.hearing.yamnet.labels


async def test_a_front_end_spreads_its_encoder_calls_over_the_encoders_of_every_node(
    shared: tuple[Voice, Hearing],
) -> None:
    voice, hearing = shared
    assert isinstance(hearing.transcriber, RemoteTranscriber) and isinstance(hearing.yamnet, RemoteYamNet)
    actors = [ray.get_actor(name_of(i), namespace=NAMESPACE) for i in range(2)]
    assert len({await actor.where.remote() for actor in actors}) == 2  # one per node, by its resource
    before = [await actor.served.remote() for actor in actors]
    talk, knock = clip(SPEECH[0]), clip("knock_a")
    # At once, as several sessions would ask: each kind of call reaches both actors.
    await asyncio.gather(
        *(asyncio.wrap_future(hearing.transcriber.submit(talk)) for _ in range(2)),
        *(asyncio.to_thread(hearing.yamnet.scores, knock) for _ in range(2)),
        *(voice.synthesize_async(f"Line {n}.") for n in range(4)),
    )
    after = [await actor.served.remote() for actor in actors]
    for kind in ("transcribe", "sounds", "voice"):
        assert all(a.get(kind, 0) > b.get(kind, 0) for a, b in zip(after, before, strict=True)), (kind, after)


async def test_a_session_with_the_shared_encoders_hears_its_client_and_speaks(
    ray_server: OnstageServer, slots: RaySlots, shared: tuple[Voice, Hearing]
) -> None:
    await until_no_sessions(ray_server)
    voice, hearing = shared
    remote = SessionFactory(None, voice, hearing, workers=slots)
    async with serving(remote, Limits(admission="ceiling", max_sessions=2, resume_grace_s=0.2)) as (_, url):
        async with SessionClient(url) as client:
            await client.start(seed=9)  # the greeter: it says hello
            await client.wait_type("character.speech", state="started", timeout=60)
            # Its voice reaches the client; heard before the user speaks, whose speech would cut it (on a
            # loaded machine the barge-in came before the greeting's first voiced chunk was sent).
            await until(lambda: any(np.frombuffer(a.pcm, "<i2").any() for a in client.received.audio), 60)
            await speak_into(client, np.concatenate([clip(SPEECH[0]), np.zeros(24_000, np.float32)]))
            transcript = await client.wait_type("input.transcript", timeout=60)
            assert words(transcript["text"])
    await until_no_sessions(ray_server)
