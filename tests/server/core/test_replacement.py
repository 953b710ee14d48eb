"""A generated chunk that waits unsent is generated again when an urgent input changes its decision, in
virtual time: the session's clock stands still while the model works (however slow the machine), so
whether an input lands on such a chunk is up to the test, not to the machine's speed.

The clock moves only while the generation loop waits for it (its chunk is done); then it moves to the
next time anything waits for (``tests.support.stepped``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from events.vocabulary import Gesture
from server.core.outputs import VideoOut
from server.sessions import SessionFactory
from tests.support.stepped import Stepped, measured, stepped_session

pytestmark = pytest.mark.asyncio(loop_scope="module")

WAITING = 2
"""The media chunk the input lands on while it waits unsent (past the session's first chunks)."""


@pytest_asyncio.fixture(loop_scope="module")
async def stepped(world_factory: SessionFactory, request: pytest.FixtureRequest) -> AsyncIterator[Stepped]:
    async with stepped_session(world_factory, "stepped", replace=request.param) as session:
        yield session


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


REGENERATION_S = 0.04
"""What regenerating a chunk takes, as the session's schedule has measured it (set by the test)."""


async def test_with_a_whole_chunk_of_lead_the_next_chunk_is_made_once_the_one_before_can_no_longer_be_replaced(
    world_factory: SessionFactory,
) -> None:
    # A little over a whole chunk, so that no generation-loop wait falls on a frame's time (the harness
    # tells the loop's waits from the sender's by their times).
    async with stepped_session(world_factory, "early", replace=True, lead=1.05) as session:
        schedule = session.core.schedule
        measured(schedule.chunk_times, REGENERATION_S)  # no regeneration takes any time on a stepped clock
        m = await session.until_loop_waits()  # chunk m is made and held while it may still be replaced
        assert session.clock.pending()[0] == pytest.approx(schedule.send_at(m) - 1.25 * REGENERATION_S)
        session.clock.advance(session.clock.pending()[0])
        # Chunk m + 1 is made at once, with the clock still before its start by the lead: a regeneration's
        # time more before its own send.
        assert await session.until_loop_waits() == m + 1
        assert session.clock.time() < schedule.start_at(m + 1)
