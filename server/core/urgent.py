"""A session's urgent inputs: the events that may redirect the chunk in flight or replace a generated chunk
not yet sent (the reflexes answer them), taken one at a time while a chunk is made, or all at once before
the next is decided. Taking one acts on it at once: a user who starts talking cuts the character off."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from events.bus import EventBus, Subscription
from events.vocabulary import (
    Event,
    Gesture,
    Interrupt,
    SoundClass,
    SoundOnset,
    SpeechStarted,
    SpeechStopped,
    TextInput,
)
from server.core.schedule import ChunkSchedule
from server.speech import SpeechPlayer

URGENT = (SpeechStarted, SpeechStopped, SoundOnset, SoundClass, Gesture, Interrupt, TextInput)
"""Events that may redirect the chunk in flight (the reflexes answer them)."""


class UrgentInputs:
    """The urgent events on ``bus`` from ``subscribe`` on, on ``schedule``'s clock; ``cut_voice`` stops the
    character's speech (``player``'s) after the last frame sent, when the user talks over it."""

    def __init__(
        self, bus: EventBus, player: SpeechPlayer, schedule: ChunkSchedule, cut_voice: Callable[[], None]
    ) -> None:
        self.bus = bus
        self.player = player
        self.schedule = schedule
        self._cut_voice = cut_voice
        self._urgent: Subscription | None = None

    def subscribe(self) -> None:
        """Queue the urgent events published from now on (the session starts)."""
        self._urgent = self.bus.subscribe(*URGENT, name="conductor", maxsize=64)

    async def get(self) -> Event:
        """The next urgent event (taken: the caller acts on it with ``take``)."""
        assert self._urgent is not None
        return await self._urgent.get()

    async def until(self, t: float) -> Event | None:
        """The next urgent event, or None once the session's clock reaches ``t``."""
        assert self._urgent is not None
        if self.schedule.now() >= t:
            return None
        due = asyncio.Event()
        timer = self.schedule.clock.call_at(t, due.set)
        event = asyncio.ensure_future(self._urgent.get())
        timeout = asyncio.ensure_future(due.wait())
        try:
            await asyncio.wait({event, timeout}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            timer.cancel()
            for waiter in (event, timeout):
                if not waiter.done():
                    waiter.cancel()
            # wait() rather than awaiting them: a CancelledError of theirs must not swallow ours.
            await asyncio.wait({event, timeout})
        return event.result() if not event.cancelled() else None

    def take(self, event: Event) -> None:
        """What an urgent event does at once, whatever chunk comes to show it."""
        if isinstance(event, SpeechStarted) and self.player.speaking:
            self._cut_voice()  # the user talks over the character

    def drain(self) -> None:
        """Take every urgent event queued (the next decision sees them all)."""
        assert self._urgent is not None
        while (event := self._urgent.get_nowait()) is not None:
            self.take(event)
