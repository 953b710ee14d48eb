"""The plan of the beat a story is at, on the session's realizer: the beat's block or its scripted plan.

Entering a beat ends the previous beat's plan (every ``script`` block is cancelled, a named plan's runner
detached and its bus task ended) and starts the new beat's: its block (source ``script``) or a runner of
its scripted plan, on the realizer's clock and, when there is a bus, on the bus's events.
"""

from __future__ import annotations

import asyncio

import msgspec

from agent.realizer import Realizer
from agent.script import Script
from agent.script_runner import RunnerState, ScriptRunner
from agent.story.graph import CompiledBeat
from events.bus import EventBus


class BeatPlan:
    """The current beat's plan in one session (a ``StoryPlayer`` holds one)."""

    def __init__(self, realizer: Realizer, bus: EventBus | None = None) -> None:
        self.realizer = realizer
        self.bus = bus
        self._runner: ScriptRunner | None = None
        self._runner_task: asyncio.Task[None] | None = None

    async def play(self, beat: CompiledBeat, cause: str | None) -> None:
        """End the previous beat's plan and start ``beat``'s."""
        await self.stop()
        for block_id, source, _ in self.realizer.blocks():
            if source == "script":
                self.realizer.cancel(block_id)
        if beat.block is not None:
            block = msgspec.structs.replace(
                beat.block,
                source="script",
                epoch=self.realizer.epoch("script"),
                label=beat.block.label or f"beat {beat.id}",
                cause=cause,
            )
            self.realizer.submit(block)
        elif beat.script is not None:
            self.start(beat.script)

    def start(self, script: Script) -> None:
        """Run ``script`` from its beginning."""
        self.follow(ScriptRunner(script, self.realizer))

    def follow(self, runner: ScriptRunner) -> None:
        """Run ``runner`` from where it is: on the realizer's clock, and on the bus's events if there is a bus."""
        self._runner = runner
        runner.attach()
        if self.bus is not None:
            self._runner_task = runner.listen(self.bus)

    def runner_state(self) -> RunnerState | None:
        """Where the scripted plan is (None when the beat plays a block, or nothing)."""
        return self._runner.state() if self._runner is not None else None

    async def stop(self) -> None:
        """Stop the scripted plan, if one runs: its runner leaves the clock and its bus task ends (blocks
        already in the realizer play on)."""
        if self._runner is not None:
            self._runner.detach()
            self._runner = None
        task, self._runner_task = self._runner_task, None
        if task is not None:
            task.cancel()
            await asyncio.wait({task})
