"""A session whose client is away (its connection dropped, no resume yet) keeps what it says for the
client's return, and an input whose answering frame went out to nobody gets its outcome then: it showed
while the client was away. Run in virtual time (``SteppedClock``), so the input lands on a chunk that is
sent while nobody is connected however fast the machine is."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest
import pytest_asyncio

from events.vocabulary import Gesture
from server.core.outputs import Unshown, VideoOut
from server.sessions import SessionFactory
from tests.support.outputs import WAIT_S, Script
from tests.support.stepped import Stepped, stepped_session

pytestmark = pytest.mark.asyncio(loop_scope="module")

WAITING = 2


@pytest_asyncio.fixture(loop_scope="module")
async def session(world_factory: SessionFactory) -> AsyncIterator[Stepped]:
    async with stepped_session(world_factory, "away", replace=True) as stepped:
        yield stepped


async def advance_until(session: Stepped, holds: Callable[[], bool]) -> None:
    """Move the clock to whatever waits next, again and again, until ``holds`` (the model works meanwhile)."""
    async with asyncio.timeout(WAIT_S):
        while not holds():
            if session.clock.pending():
                session.clock.advance(session.clock.pending()[0])
            await asyncio.sleep(0.005)


async def test_an_input_whose_frame_went_out_while_the_client_was_away_is_told_on_its_return(
    session: Stepped,
) -> None:
    core = session.core
    await session.run_until(lambda: session.loop_waits_after() == WAITING)
    wave = core.stamper(Gesture, gesture="wave", confidence=1.0)
    await core.publish(wave)
    await session.run_until(lambda: core.replaced == 1)  # the waiting chunk now answers the wave
    core.attach(None)  # the client's connection dropped before that chunk went out
    frames = core.manifest.frames_per_chunk
    await advance_until(session, lambda: core.frames_dropped >= frames)
    assert not any(wave.id in v.reflects for v in session.video())

    back = Script()
    core.attach(back)
    told = await back.first(lambda o: isinstance(o, Unshown) and o.event_id == wave.id)
    assert isinstance(told, Unshown) and told.reason == "away"
    later = [o for o in back.outputs if isinstance(o, VideoOut)]
    assert not any(wave.id in v.reflects for v in later)  # exactly one outcome
