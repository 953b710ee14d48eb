"""A generated chunk that waits unsent is generated again when an urgent input changes its decision, in
virtual time: the session's clock stands still while the model works (however slow the machine), so
whether an input lands on such a chunk is up to the test, not to the machine's speed.

The clock moves only while the generation loop waits for it (its chunk is done); then it moves to the
next time anything waits for. The sessions generate 0.9 of a chunk ahead, so a generated chunk waits most
of a chunk period for its send, and no generation-loop wait falls on a frame's time.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest
import pytest_asyncio

from events.vocabulary import Gesture
from server import protocol as p
from server.core.conductor import Conductor, ConductorConfig
from server.core.outputs import VideoOut
from server.sessions import SessionFactory
from tests.support.clock import SteppedClock
from tests.support.outputs import WAIT_S, Script

pytestmark = pytest.mark.asyncio(loop_scope="module")

LEAD = 0.9
WAITING = 2
"""The media chunk the input lands on while it waits unsent (past the session's first chunks)."""
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


@pytest_asyncio.fixture(loop_scope="module")
async def stepped(world_factory: SessionFactory, request: pytest.FixtureRequest) -> AsyncIterator[Stepped]:
    clock = SteppedClock(100.0)
    config = ConductorConfig(lead_chunks=LEAD, replace=request.param)
    sessions = SessionFactory(
        world_factory.backend, world_factory.voice, world_factory.hearing, conductor=config, clock=clock
    )
    core, _ = await sessions.create("stepped", p.SessionStart(seed=3, director="none"), "token")
    script = Script()
    await core.start(script)
    try:
        yield Stepped(core, clock, script)
    finally:
        await core.close()


async def land_on_waiting_chunk(session: Stepped) -> Gesture:
    """A wave sent once media chunk ``WAITING`` is generated, while it waits unsent."""
    await session.run_until(lambda: session.loop_waits_after() == WAITING)
    assert all(v.chunk < WAITING for v in session.video())
    wave = session.core.stamper(Gesture, gesture="wave", confidence=1.0)
    await session.core.publish(wave)
    return wave


async def shown_in(session: Stepped, wave: Gesture) -> VideoOut:
    """The first frame that reflects ``wave``."""
    await session.run_until(lambda: any(wave.id in v.reflects for v in session.video()))
    return next(v for v in session.video() if wave.id in v.reflects)


@pytest.mark.parametrize("stepped", [True], indirect=True)
async def test_an_input_on_a_generated_unsent_chunk_regenerates_it_and_shows_there(stepped: Stepped) -> None:
    wave = await land_on_waiting_chunk(stepped)
    frame = await shown_in(stepped, wave)
    assert (frame.chunk, frame.frame, frame.gen_chunk) == (WAITING, 0, WAITING)
    assert (stepped.core.replaced, stepped.core.redirects) == (1, 0)


@pytest.mark.parametrize("stepped", [False], indirect=True)
async def test_without_replacement_the_same_input_shows_in_the_next_chunk(stepped: Stepped) -> None:
    wave = await land_on_waiting_chunk(stepped)
    frame = await shown_in(stepped, wave)
    assert (frame.chunk, frame.frame) == (WAITING + 1, 0)
    assert (stepped.core.replaced, stepped.core.redirects) == (0, 0)
