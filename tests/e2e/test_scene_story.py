"""The scene in whole sessions against a real server drawing with the `world` backend: a story whose beat
brings a rainy night and whose choice opens the door shows both in the frames sent (read by the scene
probes from the JPEGs), a rewind brings the dusk back, and a Director (a real local chat-completions
server) calling `set_scene` changes the picture. The shipped tiny model does not draw the scene yet."""

from __future__ import annotations

import io

import numpy as np
import pytest
import pytest_asyncio
from PIL import Image

from server.app import OnstageServer
from server.client import SessionClient
from server.limits import Limits
from server.sessions import SessionFactory
from streaming_model.scene_probes import SceneMeasures, expected_light, measure_scene, weather_shown
from streaming_model.world_backend import WorldBackend
from tests.support.llm_server import Call, LLMServer, Reply
from tests.support.serving import directed

pytestmark = pytest.mark.asyncio(loop_scope="module")

SETTLE_CHUNKS = 18
"""Chunks (3 s) after a change before the picture is read: the slowest fade, the light, takes about 2.5 s."""


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def llm():
    async with LLMServer() as server:
        yield server


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def url(llm: LLMServer):
    factory = directed(SessionFactory(WorldBackend(warmup_chunks=1)), llm)
    srv = OnstageServer(factory, Limits(admission="ceiling", max_sessions=2, resume_grace_s=0.2))
    await srv.start("127.0.0.1", 0)
    yield f"ws://127.0.0.1:{srv.port}/v1/session"
    await srv.close()


async def scene_after(client: SessionClient, chunks: int = SETTLE_CHUNKS) -> SceneMeasures:
    """What the probes read in the last chunk's frames once ``chunks`` more chunks have arrived."""
    now = client.received.video[-1].header["chunk"] if client.received.video else 0
    last = await client.wait_frame(lambda f: f.header["chunk"] >= now + chunks and f.header["frame"] == 3, 30)
    frames = [f for f in client.received.video if f.header["chunk"] == last.header["chunk"]]
    pictures = np.stack([np.asarray(Image.open(io.BytesIO(f.jpeg)).convert("RGB")) for f in frames])
    return measure_scene(pictures)


def lit(m: SceneMeasures, light: str, lamp: str) -> bool:
    return bool((np.abs(m.light - expected_light(light, lamp)) < 0.08).all())


async def test_a_story_brings_a_rainy_night_opens_the_door_and_a_rewind_brings_the_dusk_back(
    url: str,
) -> None:
    async with SessionClient(url) as client:
        await client.start(story="stormy_night", seed=3, director="script")
        dusk = await client.wait_type("story.state", node="dusk")
        m = await scene_after(client)
        assert (
            lit(m, "dusk", "off") and m.door_shown.all() and (m.door_open < 0.1).all() and m.ball_shown.all()
        )
        assert (weather_shown(m) == 0).all()
        dusk_scene = client.received.of_type("scene.changed")[-1]["scene"]  # told as the dusk came
        assert dusk_scene["light"] == "dusk"

        await client.send({"type": "story.choose", "choice": "wait"})
        await client.wait_type("story.state", node="storm")
        m = await scene_after(client)
        assert lit(m, "night", "on") and (weather_shown(m) == 1).all() and m.lamp_on.all()

        await client.send({"type": "story.choose", "choice": "open"})
        await client.wait_type("story.state", node="inside")
        m = await scene_after(client)
        assert (m.door_open > 0.9).all() and (weather_shown(m) == 1).all()

        since = len(client.received.messages)
        await client.send({"type": "story.rewind", "checkpoint": dusk["checkpoint"]})
        back = await client.wait_for(lambda msg: msg.get("type") == "story.state", 15, since=since)
        assert back["node"] == "dusk" and back["checkpoint"] == dusk["checkpoint"]
        # The rewind brought an earlier scene back: told as any change is, before the chunk showing it.
        told = await client.wait_for(lambda msg: msg.get("type") == "scene.changed", 15, since=since)
        assert told["scene"] == dusk_scene
        m = await scene_after(client)
        assert lit(m, "dusk", "off") and (weather_shown(m) == 0).all() and (m.door_open < 0.1).all()


async def test_a_director_calling_set_scene_changes_the_picture(url: str, llm: LLMServer) -> None:
    llm.enqueue(Reply(tool_calls=[Call("set_scene", {"light": "night", "weather": "snow"})]), Reply(text=""))
    async with SessionClient(url) as client:
        await client.start(seed=5, director="llm")
        before = await scene_after(client, 6)
        assert lit(before, "day", "none") and (weather_shown(before) == 0).all()
        await client.send({"type": "input.text", "text": "Make it a snowy night, please."})
        await llm.wait_for_requests(1)
        after = await scene_after(client)
        assert lit(after, "night", "none") and (weather_shown(after) == 2).all()
        tools = {t["function"]["name"] for t in llm.requests[0]["tools"]}
        assert "set_scene" in tools  # generated from the world's manifest
