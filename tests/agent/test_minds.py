"""Wiring a session's minds: the scripted plan by default, the Director when an endpoint is configured."""

from __future__ import annotations

import asyncio

import pytest

from agent.director_config import DirectorConfig, choose_mind
from agent.minds import Minds
from agent.reflex import ReflexConfig
from agent.script import load_script
from events.bus import EventBus
from events.stamp import Stamper
from events.vocabulary import Gesture, TextInput
from streaming_model.manifest import build_manifest
from tests.support.llm_server import Call, LLMServer, Reply
from tools.character import build_toolbox

MANIFEST = build_manifest()


async def test_without_an_endpoint_the_script_drives_the_realizer() -> None:
    bus = EventBus()
    config = DirectorConfig()
    minds = Minds.build(
        bus=bus,
        session="s",
        mind=choose_mind("auto", config),
        manifest=MANIFEST,
        config=config,
        script=load_script("greeter", MANIFEST),
        voice="estimate",
        reflexes=ReflexConfig(),
    )
    assert minds.script is not None and minds.director is None and minds.reflex is not None
    minds.start()
    minds.tick(0)
    await bus.publish(Stamper("s")(Gesture, gesture="wave"))
    await asyncio.sleep(0)
    assert any(minds.tick(k).condition.action == "wave" for k in range(1, 4))
    assert minds.realizer.locks["body"].startswith("reflex")  # the reflex answered first and outranks
    await minds.stop()


async def test_with_an_endpoint_the_director_drives_the_realizer_with_the_scripts_places() -> None:
    async with LLMServer() as llm:
        llm.enqueue(Reply(tool_calls=[Call("move_to", {"place": "door"})]))
        bus = EventBus()
        config = DirectorConfig(base_url=llm.base_url, debounce_s=0.01)
        minds = Minds.build(
            bus=bus,
            session="s",
            mind=choose_mind("auto", config),
            manifest=MANIFEST,
            config=config,
            script=load_script("living_room", MANIFEST),
            tools=build_toolbox(MANIFEST, ("window", "door", "middle")),
        )
        assert minds.director is not None and minds.script is None
        minds.start()
        await bus.publish(Stamper("s")(TextInput, text="Go to the door, please."))
        async with asyncio.timeout(10):
            await minds.director.settle()
        assert minds.tick(0).condition.action == "walk_right"
        await minds.stop()


def test_the_llm_mind_needs_tools() -> None:
    with pytest.raises(ValueError, match="tools"):
        Minds.build(bus=EventBus(), session="s", mind="llm", manifest=MANIFEST, config=DirectorConfig())
