"""Urgent inputs: every event the chunk maker's wait takes off the bus reaches it, also when the wait is
called off in the same turn of the event loop in which it took one."""

from __future__ import annotations

import asyncio
from collections import deque

import pytest

from agent.realizer import Realizer
from events.bus import EventBus
from events.stamp import Stamper
from events.vocabulary import Gesture
from server.core.schedule import ChunkSchedule
from server.core.urgent import UrgentInputs
from server.media import MediaClock
from server.speech import SpeechPlayer
from server.voice import Voice
from streaming_model.manifest import build_manifest
from tests.support.clock import VirtualClock

pytestmark = pytest.mark.asyncio(loop_scope="module")

MANIFEST = build_manifest(fps=16, frames_per_chunk=3, width=160, height=96)


def urgent_inputs(bus: EventBus) -> UrgentInputs:
    schedule = ChunkSchedule(
        MediaClock.of(MANIFEST),
        lead_chunks=1.0,
        redirect=True,
        redirect_margin=1.25,
        finish_times=deque(),
        clock=VirtualClock(0.0),
    )
    urgent = UrgentInputs(bus, SpeechPlayer(Voice(), Realizer(manifest=MANIFEST)), schedule, lambda: None)
    urgent.subscribe()
    return urgent


async def called_off_after_taking(bus: EventBus, urgent: UrgentInputs, event: Gesture) -> None:
    """A wait for the next input takes ``event`` off the bus and is called off before it could return it, as
    the chunk maker's watch over a generation calls its wait off when the generation finishes in that same
    turn of the loop."""
    waiting = asyncio.ensure_future(urgent.get())
    await asyncio.sleep(0)  # it waits on the bus
    await bus.publish(event)
    while bus.subscriptions[0].pending():  # noqa: ASYNC110 (one turn of the loop at a time, no event to wait on)
        await asyncio.sleep(0)
    assert not waiting.done()  # taken, not yet returned
    waiting.cancel()
    await asyncio.wait({waiting})
    assert waiting.cancelled()


async def test_an_event_taken_as_its_wait_is_called_off_comes_with_the_next_wait() -> None:
    # The input was lost with the wait.
    bus = EventBus()
    urgent = urgent_inputs(bus)
    wave = Stamper("t")(Gesture, gesture="wave", confidence=1.0)
    await called_off_after_taking(bus, urgent, wave)
    assert await asyncio.wait_for(urgent.get(), 1.0) is wave


async def test_a_kept_event_is_drained_with_the_rest() -> None:
    bus = EventBus()
    urgent = urgent_inputs(bus)
    stamp = Stamper("t")
    first, second = (stamp(Gesture, gesture=g, confidence=1.0) for g in ("wave", "nod"))
    await called_off_after_taking(bus, urgent, first)
    await bus.publish(second)
    assert urgent.drain() == {first.id, second.id}
