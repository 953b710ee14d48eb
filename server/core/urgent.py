"""A session's urgent inputs: the events that may redirect the chunk in flight or replace a generated chunk
not yet sent (the reflexes answer them), taken one at a time while a chunk is made, or all at once before
the next is decided. Taking one acts on it at once: a user who starts talking cuts the character off.
With ``SpeechConfig.redirects``, the Director's speech whose first audio is ready is one too
(``VoiceReady``). The listeners' hunches (``events.hunch``, from the ears and not the bus) come with
them where a generated chunk waits for its send (``until``), for a splice prepared ahead
(``server.core.foresight``)."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

import msgspec

from events.bus import EventBus, Subscription
from events.hunch import Hunch
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


class VoiceReady(msgspec.Struct, frozen=True):
    """The first audio of speech the Director submitted since the last decision is synthesised
    (``SpeechPlayer.on_ready``): a re-decision may now start it without waiting for Piper."""


Urgent = Event | VoiceReady
"""What wakes the chunk maker: an urgent event from the bus, or the Director's voice being ready."""


HUNCHES_KEPT = 8
"""Hunches kept for ``until`` at most (the oldest forgotten): a chunk's wait takes them as they come."""


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
        self._kept: Event | None = None
        """An event taken off the bus by a wait that was called off before it could return it."""
        self._voice_ready = asyncio.Event()
        self._hunches: deque[Hunch] = deque(maxlen=HUNCHES_KEPT)
        self._hunched = asyncio.Event()
        if player.config.redirects:
            player.on_ready = self._voice_ready.set

    def subscribe(self) -> None:
        """Queue the urgent events published from now on (the session starts)."""
        self._urgent = self.bus.subscribe(*URGENT, name="conductor", maxsize=64)

    async def get(self) -> Urgent:
        """The next urgent input (taken: the caller acts on it with ``take``); hunches wait for ``until``."""
        event = await self._next(None)
        assert event is not None and not isinstance(event, Hunch)
        return event

    def hunch(self, hunch: Hunch) -> None:
        """A hunch from the ears (``EarsService.on_hunch``), for ``until``."""
        self._hunches.append(hunch)
        self._hunched.set()

    async def until(self, t: float) -> Urgent | Hunch | None:
        """The next urgent input or hunch, or None once the session's clock reaches ``t``."""
        if self.schedule.now() >= t:
            return None
        due = asyncio.Event()
        timer = self.schedule.clock.call_at(t, due.set)
        try:
            return await self._next(due, hunches=True)
        finally:
            timer.cancel()

    async def _next(self, due: asyncio.Event | None, *, hunches: bool = False) -> Urgent | Hunch | None:
        """The next urgent input (a bus event first, then the voice, then a hunch where ``hunches``), or None
        once ``due`` is set. One wait for all: an event taken off the bus is always returned, never dropped."""
        assert self._urgent is not None
        if (
            (event := self._take_kept()) is None
            and not self._voice_ready.is_set()
            and not (hunches and self._hunches)
        ):
            taking = asyncio.ensure_future(self._urgent.get())
            waits = {taking, asyncio.ensure_future(self._voice_ready.wait())}
            if hunches:
                self._hunched.clear()
                waits.add(asyncio.ensure_future(self._hunched.wait()))
            if due is not None:
                waits.add(asyncio.ensure_future(due.wait()))
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiter in waits:
                    waiter.cancel()  # a done one keeps its result
                # wait() rather than awaiting them: a CancelledError of theirs must not swallow ours.
                await asyncio.wait(waits)
                if not taking.cancelled() and taking.exception() is None:
                    # Kept, not returned: where this wait itself is being called off (the caller's job
                    # finished in the same turn of the loop), the event would be lost with it.
                    self._kept = taking.result()
            if not taking.cancelled():
                kept = self._take_kept()
                return kept if kept is not None else taking.result()  # the subscription's end, raised
        if event is not None:
            return event
        if self._voice_ready.is_set():
            self._voice_ready.clear()
            return VoiceReady()
        if hunches and self._hunches:
            return self._hunches.popleft()
        return None

    def _take_kept(self) -> Event | None:
        """The event a called-off wait kept, else the next one on the bus (None if there is none)."""
        assert self._urgent is not None
        event, self._kept = self._kept, None
        return event if event is not None else self._urgent.get_nowait()

    def take(self, event: Urgent) -> None:
        """What an urgent input does at once, whatever chunk comes to show it."""
        if isinstance(event, SpeechStarted) and self.player.speaking:
            self._cut_voice()  # the user talks over the character

    def drain(self) -> set[str]:
        """Take every urgent input queued (the next decision sees them all): their event ids."""
        assert self._urgent is not None
        self._voice_ready.clear()
        self._hunches.clear()  # the chunk they were for is sent: its splices are past
        taken = set()
        while (event := self._take_kept()) is not None:
            self.take(event)
            taken.add(event.id)
        return taken
