"""A session's minds without the server, against a real local chat-completions server: the Director's
test stage (bus, realizer, Director, a way to make events); its fixtures are in conftest.py."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from agent.acknowledge import Acknowledgement
from agent.director import Director
from agent.director_config import DirectorConfig
from agent.realizer import ChunkOutput, Realizer
from agent.script import Place
from events.bus import EventBus, Subscription
from events.stamp import Stamper
from events.vocabulary import EndOfTurn, Event
from streaming_model.manifest import build_manifest
from tests.support.llm_server import LLMServer
from tools.character import build_toolbox

MANIFEST = build_manifest()
LIMIT_S = 10.0


@dataclass
class Stage:
    """A session's minds without the server: bus, realizer, Director, and a way to make events."""

    llm: LLMServer
    bus: EventBus
    realizer: Realizer
    director: Director
    stamp: Stamper
    watch: Subscription

    async def say(self, text: str) -> EndOfTurn:
        event = self.stamp(EndOfTurn, audio_ms=1000.0, silence_ms=600.0, transcript=text)
        await self.bus.publish(event)
        return event

    async def settle(self) -> None:
        async with asyncio.timeout(LIMIT_S):
            await self.director.settle()

    def tick(self, count: int) -> list[ChunkOutput]:
        start = self.realizer.chunk + 1
        return [self.realizer.tick(k) for k in range(start, start + count)]

    def seen(self, kind: type[Event]) -> list[Any]:
        events = []
        while (event := self.watch.get_nowait()) is not None:
            events.append(event)
        return [e for e in events if isinstance(e, kind)]


def make_stage(llm: LLMServer, acknowledgement: Acknowledgement | None = None, **config: Any) -> Stage:
    """A started stage whose Director calls ``llm`` (``config``: DirectorConfig fields to change)."""
    bus = EventBus()
    watch = bus.subscribe(maxsize=10_000)
    realizer = Realizer(bus, session="s1")
    settings = {"base_url": llm.base_url, "debounce_s": 0.01, "backoff_s": 0.05, "timeout_s": 5.0, **config}
    director = Director(
        DirectorConfig(**settings),
        realizer,
        build_toolbox(MANIFEST, ("window",)),
        bus=bus,
        session="s1",
        places={"window": Place(x=-0.85, gaze=(-1.0, -0.4))},
        acknowledgement=acknowledgement,
    )
    director.start()
    return Stage(llm, bus, realizer, director, Stamper("s1", prefix="u"), watch)
