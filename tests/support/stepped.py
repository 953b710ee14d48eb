"""A session core on a ``SteppedClock``, for tests that choose when its clock moves: it stands still while
the model works, so where an input lands is up to the test, not to the machine's speed."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Callable

from server import protocol as p
from server.core.conductor import Conductor, ConductorConfig
from server.core.outputs import VideoOut
from server.sessions import SessionFactory
from server.speech import SpeechConfig
from tests.support.clock import SteppedClock
from tests.support.outputs import WAIT_S, Script

LEAD = 0.9
"""The sessions generate 0.9 of a chunk ahead: a generated chunk waits most of a chunk period for its send,
and no generation-loop wait falls on a frame's time."""
MAX_CHUNKS = 50


class Stepped:
    """One session on a ``SteppedClock`` and what it sent."""

    def __init__(self, core: Conductor, clock: SteppedClock, script: Script) -> None:
        self.core, self.clock, self.script = core, clock, script

    def loop_waits_after(self) -> int | None:
        """The media chunk the generation loop waits after, if it waits for the clock: chunk m is generated
        and waits for the end of its replace window, or it is handed over and the loop waits for chunk
        m + 1's start. None while the model works."""
        schedule = self.core.schedule
        for t in self.clock.pending():
            for m in range(MAX_CHUNKS):
                if abs(t - schedule.hand_at(m)) < 1e-9 or abs(t - schedule.start_at(m + 1)) < 1e-9:
                    return m
        return None

    async def until_loop_waits(self) -> int:
        async with asyncio.timeout(WAIT_S):
            while (m := self.loop_waits_after()) is None:  # noqa: ASYNC110 (the model works in a thread)
                await asyncio.sleep(0.005)
            return m

    async def run_until(self, holds: Callable[[], bool]) -> None:
        """Move the clock on, one wait at a time and only while the generation loop waits, until ``holds``."""
        while not holds():
            await self.until_loop_waits()
            self.clock.advance(self.clock.pending()[0])
            await asyncio.sleep(0)

    def video(self) -> list[VideoOut]:
        return [o for o in self.script.outputs if isinstance(o, VideoOut)]


def measured(times: deque[float], seconds: float) -> None:
    """Fill one of a schedule's records of how long things took (``chunk_times``, ``produce_times``,
    ``made_times``) as a machine on which each took ``seconds`` would: the stepped clock stands still while
    the model works, so the conductor's own entries are near zero, and a full record keeps them from moving
    its median or quantiles within a test."""
    times.extend([seconds] * (times.maxlen or 0))


@contextlib.asynccontextmanager
async def stepped_session(
    factory: SessionFactory, name: str, replace: bool, lead: float = LEAD, speech: SpeechConfig | None = None
) -> AsyncIterator[Stepped]:
    """A session of ``factory``'s backend on a stepped clock, started with a ``Script`` sink; closed after.
    ``speech``: how its voice starts (``SpeechConfig()`` by default)."""
    clock = SteppedClock(100.0)
    config = ConductorConfig(lead_chunks=lead, replace=replace)
    sessions = SessionFactory(
        factory.backend, factory.voice, factory.hearing, conductor=config, clock=clock, speech=speech
    )
    core, _ = await sessions.create(name, p.SessionStart(seed=3, director="none"), "token")
    script = Script()
    await core.start(script)
    try:
        yield Stepped(core, clock, script)
    finally:
        await core.close()
