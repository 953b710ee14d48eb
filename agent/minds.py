"""The minds of one session, wired together: the realizer plus the scripted plan or the Director.

The session conductor builds one ``Minds`` per session, ``start()``s it, calls ``tick(k)`` once per chunk
and forwards the voice's reports to ``realizer``. With the LLM as the mind, a script given too still
lends its places, idle variety and its answers to what the user does when the Director has none (its
timeline and triggers stay off: the Director decides). Reflexes,
when configured, run under either mind.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping

import openai
from langgraph.checkpoint.base import BaseCheckpointSaver

from agent.acknowledge import Acknowledgement
from agent.director import Director, ErrorCallback
from agent.director_config import DirectorConfig, Mind
from agent.idle import IdleVariety
from agent.realizer import ChunkOutput, Realizer
from agent.realizer_speech import VoiceReports
from agent.reflex import ReflexConfig, ReflexPolicy
from agent.script import Script
from agent.script_runner import ScriptRunner
from agent.tooling import ToolSet
from events.bus import EventBus
from streaming_model.manifest import Manifest


class Minds:
    """A session's realizer and its mind; ``script`` and ``director`` are None when not in use."""

    def __init__(
        self,
        realizer: Realizer,
        bus: EventBus,
        script: ScriptRunner | None = None,
        director: Director | None = None,
        reflex: ReflexPolicy | None = None,
    ) -> None:
        self.realizer = realizer
        self.bus = bus
        self.script = script
        self.director = director
        self.reflex = reflex
        self._listeners: list[asyncio.Task[None]] = []

    @classmethod
    def build(
        cls,
        *,
        bus: EventBus,
        session: str,
        mind: Mind,
        manifest: Manifest,
        config: DirectorConfig,
        script: Script | None = None,
        tools: ToolSet | None = None,
        reflexes: ReflexConfig | None = None,
        fallbacks: Mapping[str, str] | None = None,
        voice: VoiceReports = "server",
        on_error: ErrorCallback | None = None,
        client: openai.AsyncOpenAI | None = None,
        checkpointer: BaseCheckpointSaver | None = None,
    ) -> Minds:
        """Wire the minds for ``mind`` (see ``director_config.choose_mind``); the LLM needs ``tools``.
        ``reflexes`` adds the reflex policy, reading the bus (leave it None to call one yourself); it uses
        ``fallbacks`` (the backend's stand-ins for actions it lacks) as the model will."""
        idle = IdleVariety(script.idle) if script is not None else None
        realizer = Realizer(bus, session=session, manifest=manifest, idle=idle, voice=voice)
        reflex = ReflexPolicy(realizer, reflexes, fallbacks) if reflexes is not None else None
        if mind == "script" and script is not None:
            return cls(realizer, bus, script=ScriptRunner(script, realizer), reflex=reflex)
        if mind == "llm":
            if tools is None:
                raise ValueError("the LLM mind needs the Director's tools")
            director = Director(
                config,
                realizer,
                tools,
                bus=bus,
                session=session,
                places=dict(script.places) if script is not None else None,
                client=client,
                checkpointer=checkpointer,
                on_error=on_error,
                manifest=manifest,
                acknowledgement=Acknowledgement(manifest, script),
            )
            return cls(realizer, bus, director=director, reflex=reflex)
        return cls(realizer, bus, reflex=reflex)

    def start(self) -> None:
        """Start listening: reflexes, the script's triggers and clock, or the Director's background task."""
        if self._listeners:
            return
        if self.reflex is not None:
            self._listeners.append(self.reflex.listen(self.bus))
        if self.script is not None:
            self.script.attach()
            self._listeners.append(self.script.listen(self.bus))
        if self.director is not None:
            self.director.start()

    async def stop(self) -> None:
        """Stop the mind's tasks (the realizer needs no stopping)."""
        for task in self._listeners:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.director is not None:
            await self.director.stop()

    async def run_script(self, script: Script) -> None:
        """Switch to ``script`` (a ``plan.run`` from the user): the old one stops firing, the new one's
        timeline starts at the next chunk. Blocks already running play on unless the new plan replaces them.
        """
        if self.script is not None:
            self.script.detach()
            for task in [t for t in self._listeners if t.get_name().startswith("script:")]:
                task.cancel()
                self._listeners.remove(task)
        self.script = ScriptRunner(script, self.realizer)
        self.script.attach()
        self._listeners.append(self.script.listen(self.bus))

    def tick(self, k: int) -> ChunkOutput:
        """Chunk ``k``'s condition and speech cues (see ``Realizer.tick``)."""
        return self.realizer.tick(k)
