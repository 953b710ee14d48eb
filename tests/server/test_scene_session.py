"""The scene over the protocol (docs/protocol.md, The scene): ``session.started`` names the parts the
model draws, a plan's ``set_scene`` is told once as ``scene.changed`` before the first frame that shows it,
and the frames after it show the scene it names (read from the pixels); media out tells a scene going back
(a story rewind) and tells the scene again on a new connection."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator

import numpy as np
import pytest

from agent.realizer import ChunkOutput, Realizer
from events.tracing import Tracer
from server.app import OnstageServer
from server.client import SessionClient
from server.core.chunk import ReadyChunk
from server.core.media_out import MediaOut
from server.core.outputs import AudioOut, Output, SceneChanged, VideoOut
from server.core.schedule import ChunkSchedule
from server.limits import Limits
from server.media import MediaClock
from server.sessions import SessionFactory
from server.speech import SpeechPlayer
from server.voice import Voice
from streaming_model.condition import ChunkCondition
from streaming_model.manifest import SCENE, build_manifest
from streaming_model.scene_probes import expected_light, measure_scene, weather_shown
from streaming_model.world_backend import WorldBackend
from tests.support.clock import VirtualClock

pytestmark = pytest.mark.asyncio(loop_scope="module")

NIGHT = np.array([0.30, 0.34, 0.48])
QUIET = {"name": "quiet", "description": "nothing on the timeline"}
NIGHT_RAIN = {
    "name": "night_rain",
    "timeline": [
        {"at_s": 0.0, "behaviors": [{"kind": "set_scene", "changes": {"light": "night", "weather": "rain"}}]}
    ],
}


@contextlib.asynccontextmanager
async def world_server(factory: SessionFactory, resume_grace_s: float = 0.2) -> AsyncIterator[str]:
    """A server on loopback whose sessions run on the ``world`` backend at its default clock and picture
    (128x128, what the scene probes read)."""
    backend = WorldBackend(warmup_chunks=1)
    sessions = SessionFactory(backend, factory.voice, factory.hearing)
    srv = OnstageServer(sessions, Limits(admission="ceiling", resume_grace_s=resume_grace_s))
    await srv.start("127.0.0.1", 0)
    try:
        yield f"ws://127.0.0.1:{srv.port}/v1/session"
    finally:
        await srv.close()


async def test_session_started_names_the_scene_on_the_world_and_none_on_the_default_model(
    factory: SessionFactory, url: str
) -> None:
    async with world_server(factory) as world_url, SessionClient(world_url) as client:
        started = await client.start(seed=1, plan=QUIET)
    scene = started["capabilities"]["scene"]
    assert scene == {spec.name: list(spec.choices) for spec in SCENE}
    assert list(scene) == ["light", "lamp", "weather", "door", "prop"]
    assert scene["light"][0] == "day" and scene["weather"][0] == "clear"
    async with SessionClient(url) as client:  # the shipped tiny model: it draws no scene
        started = await client.start(seed=1)
    assert started["capabilities"]["scene"] == {}


async def test_a_set_scene_plan_is_told_once_before_the_frames_that_show_it(factory: SessionFactory) -> None:
    async with world_server(factory) as world_url, SessionClient(world_url) as client:
        started = await client.start(seed=2, plan=QUIET)
        per_s = started["fps"] / started["chunk_frames"]  # chunks a second
        await client.wait_frame(lambda f: f.header["chunk"] >= 6, timeout=20)
        await client.send({"type": "plan.run", "plan": NIGHT_RAIN, "ref": "night"})
        await client.wait_type("input.accepted", ref="night")
        changed = await client.wait_type("scene.changed", timeout=10)
        at = changed["chunk"]
        settled, end = at + round(2.0 * per_s), at + round(3.0 * per_s)
        await client.wait_frame(lambda f: f.header["chunk"] >= end, timeout=20)

    assert changed["scene"] == {"light": "night", "weather": "rain"}
    assert changed["pts_ms"] == pytest.approx(at * started["chunk_frames"] * 1000 / started["fps"])
    assert len(client.received.of_type("scene.changed")) == 1
    # Told before the first frame of its chunk, which the frames before it do not belong to.
    told_at = first_t(client)
    first = next(f for f in client.received.video if f.header["chunk"] == at)
    assert first.header["frame"] == 0 and told_at <= first.t
    assert all(f.t <= told_at for f in client.received.video if f.header["chunk"] < at)

    video = client.received.video
    before = [f for f in video if f.header["chunk"] < at]
    after = [f for f in video if settled <= f.header["chunk"] < end]
    assert len(before) >= 6 * started["chunk_frames"] and len(after) >= started["chunk_frames"]
    day = measure_scene(client.received.pictures(before))
    assert np.abs(day.light - expected_light("day", "none")).max() < 0.08
    assert (weather_shown(day) == 0).all()
    night = measure_scene(client.received.pictures(after))
    assert np.abs(night.light - NIGHT).max() < 0.08, night.light.mean(0)
    assert (weather_shown(night) == 1).all(), weather_shown(night)


async def test_a_scene_set_from_the_start_is_told_first_and_again_to_a_resumed_client(
    factory: SessionFactory,
) -> None:
    async with world_server(factory, resume_grace_s=10.0) as world_url:
        async with SessionClient(world_url) as client:
            started = await client.start(seed=3, plan=NIGHT_RAIN)
            first = await client.wait_type("scene.changed", timeout=10)
            await client.wait_frame(lambda f: f.header["chunk"] >= first["chunk"] + 2, timeout=20)
        # Told before any frame of the first chunk naming it (none of the frames before it shows it).
        assert first["scene"] == {"light": "night", "weather": "rain"}
        assert all(f.header["chunk"] < first["chunk"] for f in client.received.video if f.t < first_t(client))
        resume = {"session_id": started["session_id"], "resume_token": started["resume_token"]}
        async with SessionClient(world_url) as again:
            await again.start(resume=resume)
            frame = await again.wait_frame(lambda f: True, timeout=20)
            told = await again.wait_type("scene.changed", timeout=1)
        # The new connection knew only the defaults: told the scene before its first frame.
        assert told["scene"] == first["scene"] and told["chunk"] == frame.header["chunk"]
        assert first_t(again) <= frame.t
        assert len(again.received.of_type("scene.changed")) == 1


def first_t(client: SessionClient) -> float:
    """When the first ``scene.changed`` arrived (the client's monotonic clock)."""
    return next(t for t, m in client.received.messages if m.get("type") == "scene.changed")


# ------------------------------------------------------------------ media out, in virtual time

MANIFEST = build_manifest(fps=16, frames_per_chunk=3, width=160, height=96, scene=True)
MEDIA = MediaClock.of(MANIFEST)


def scene_chunk(index: int, scene: dict[str, str]) -> ReadyChunk:
    condition = ChunkCondition("idle", scene=tuple(scene.items()))
    decision = ChunkOutput(chunk=index, condition=condition)
    jpegs = [b"jpeg"] * MEDIA.chunk_frames
    return ReadyChunk(index, index, jpegs, (), 0.0, decision, condition, 0.0, 0.0)


async def test_media_out_tells_each_change_a_change_back_and_the_scene_on_a_new_connection() -> None:
    clock = VirtualClock(50.0)
    schedule = ChunkSchedule(
        MEDIA, lead_chunks=1.0, redirect=True, redirect_margin=1.25, finish_times=deque(), clock=clock
    )
    schedule.begin(0.5)
    sent: list[Output] = []
    frames_sent = asyncio.Event()
    want = 0

    async def out(item: Output) -> None:
        sent.append(item)
        if sum(isinstance(i, VideoOut) for i in sent) == want:
            frames_sent.set()

    player = SpeechPlayer(Voice(), Realizer(manifest=MANIFEST))
    media = MediaOut("s", schedule, player, (MANIFEST.width, MANIFEST.height), Tracer(), out)
    task = asyncio.create_task(media.run())

    async def send(*scenes: dict[str, str]) -> None:
        nonlocal want
        start = want // MEDIA.chunk_frames
        want += len(scenes) * MEDIA.chunk_frames
        frames_sent.clear()
        for k, scene in enumerate(scenes):
            media.ready.put_nowait(scene_chunk(start + k, scene))
        await asyncio.wait_for(frames_sent.wait(), 10)

    night = {"light": "night"}
    try:
        # Nothing named at first: nothing to tell. Night, held, then back to the defaults (as a rewind to
        # before it does): told twice.
        await send({}, {}, night, night, {}, {})
        media.retell()  # a new connection, while the scene is the defaults: nothing to tell
        await send({})
        await send(night)
        media.retell()  # a new connection mid-scene: told before the next frame, even with no change
        await send(night, night)
    finally:
        task.cancel()
    told = [item for item in sent if isinstance(item, SceneChanged)]
    named = (("light", "night"),)
    assert [(t.chunk, t.scene) for t in told] == [(2, named), (4, ()), (7, named), (8, named)]
    for t in told:
        assert t.pts_ms == MEDIA.pts_ms(t.chunk * MEDIA.chunk_frames)
        i = sent.index(t)
        nxt = sent[i + 1]  # right before the chunk's first frame: its audio, then its picture
        assert isinstance(nxt, AudioOut) and nxt.pts_ms == t.pts_ms
        frame = sent[i + 2]
        assert isinstance(frame, VideoOut) and frame.chunk == t.chunk and frame.frame == 0
