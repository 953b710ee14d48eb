"""Whether an urgent input redirects the chunk in flight depends on what the backend declares it can
interrupt (``Capabilities.interrupt``), in virtual time on the ``world`` backend: a backend that can stop
a chunk between steps has it cancelled and generated again; one that cannot has it finished, then
replaced before anyone saw it."""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from events.vocabulary import Gesture
from server.sessions import SessionFactory
from streaming_model.backend import Interrupt
from tests.support.backends import Recording
from tests.support.outputs import WAIT_S
from tests.support.stepped import stepped_session

IN_FLIGHT = 3
"""The generator chunk an input finds in flight (past the session's first chunks)."""


@pytest.mark.parametrize(("interrupt", "redirected", "replaced"), [("step", 1, 0), ("none", 0, 1)])
async def test_an_input_redirects_a_chunk_in_flight_only_where_the_backend_can_stop_one(
    world_factory: SessionFactory, interrupt: Interrupt, redirected: int, replaced: int
) -> None:
    world = world_factory.backend
    assert world is not None
    caps = msgspec.structs.replace(world.manifest.capabilities, interrupt=interrupt)
    backend = Recording(world, caps, gate=IN_FLIGHT)
    factory = SessionFactory(backend, world_factory.voice, world_factory.hearing)
    async with stepped_session(factory, f"gated-{interrupt}", replace=True) as session:
        async with asyncio.timeout(WAIT_S):
            while not backend.gated.is_set():  # the clock moves on until chunk IN_FLIGHT is in flight
                if session.loop_waits_after() is not None:
                    session.clock.advance(session.clock.pending()[0])
                await asyncio.to_thread(backend.gated.wait, 0.01)
        wave = session.core.stamper(Gesture, gesture="wave", confidence=1.0)
        await session.core.publish(wave)
        await session.run_until(lambda: any(wave.id in v.reflects for v in session.video()))
        frame = next(v for v in session.video() if wave.id in v.reflects)
        assert (frame.gen_chunk, frame.frame) == (IN_FLIGHT, 0)  # shown in the chunk it found in flight
        assert (session.core.redirects, session.core.replaced) == (redirected, replaced)
