"""What the client is told besides media: what the ears heard and the minds did as it happens, the
session's figures once a second, and an outcome for every input that will not show.

Every input gets one outcome: it shows in a frame's ``reflects``, or the client hears an ``Unshown``
saying why not: no mind answered it (once the reactive minds have settled and the Director will not
answer it either), or every block it caused ended unseen (``InputUnshown`` on the bus).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from agent.minds import Minds
from agent.progress import CharacterSpeech, DirectorError, DirectorPlan, InputUnshown
from events.bus import EventBus, Subscription
from events.vocabulary import (
    Gesture,
    SoundClass,
    SoundOnset,
    SpeechStarted,
    SpeechStopped,
    TextInput,
    Transcript,
)
from server.core.outputs import Figures, Output, Unshown

OUTCOMES_REMEMBERED = 512
"""How many inputs' outcomes are remembered as sent (one outcome per input)."""

ANSWERED = (SpeechStarted, SoundOnset, SoundClass, Gesture, TextInput, Transcript)
"""Inputs that get an outcome: a frame that reflects them, or an ``Unshown`` (an interrupt is always
reflected by the next chunk; a speech stop ends the listening its start began)."""

TOLD = (
    SpeechStarted,
    SpeechStopped,
    SoundOnset,
    SoundClass,
    Transcript,
    CharacterSpeech,
    DirectorPlan,
    DirectorError,
)
"""Bus events the client is told of as they happen (and ``InputUnshown``, as an ``Unshown``)."""


class Notices:
    """The session's notices into ``out``; ``figures`` gives the session's figures now."""

    def __init__(
        self,
        bus: EventBus,
        minds: Minds,
        out: Callable[[Output], Awaitable[None]],
        figures: Callable[[], Figures],
        every_s: float,
    ) -> None:
        self.bus = bus
        self.minds = minds
        self._out = out
        self._figures = figures
        self._every_s = every_s
        self._outcomes: dict[str, None] = {}  # inputs answered with an Unshown

    def loops(self) -> list[tuple[str, Callable[[], Coroutine[Any, Any, None]]]]:
        """The tasks to run, by name: subscribed now, so that nothing published from here on is missed."""
        told = self.bus.subscribe(*TOLD, InputUnshown, name="client", maxsize=256)
        answered = self.bus.subscribe(*ANSWERED, name="outcomes", maxsize=256)
        return [
            ("forward", lambda: self._tell(told)),
            ("metrics", self._metrics),
            ("outcomes", lambda: self._answer(answered)),
        ]

    async def _tell(self, sub: Subscription) -> None:
        async for event in sub:
            if isinstance(event, InputUnshown):
                await self._unshown(event.cause, event.reason, event.detail)
            elif isinstance(event, TOLD) and not (isinstance(event, Transcript) and event.source == "client"):
                await self._out(event)  # (a client's own transcript is no news to it)

    async def _answer(self, sub: Subscription) -> None:
        """Answer every input no mind answered: once the reactive minds have settled, an input that no
        block was submitted for (and the Director will not answer) gets an ``Unshown``."""
        async for event in sub:
            if isinstance(event, Transcript) and event.source != "client":
                continue  # the server's transcript of speech whose start was already answered
            await self.bus.settle()
            director = self.minds.director
            if self.minds.realizer.caused(event.id) or (director is not None and director.answers(event)):
                continue
            reflex = self.minds.reflex
            declined = reflex.declined.get(event.id) if reflex is not None else None
            reason, detail = declined or (
                "no_reaction",
                f"nothing in this session answers {type(event).__struct_config__.tag}",
            )
            await self._unshown(event.id, reason, detail)

    async def _unshown(self, event_id: str, reason: str, detail: str) -> None:
        """Tell the client, once, that input ``event_id`` will not show and why."""
        if event_id in self._outcomes:
            return
        self._outcomes[event_id] = None
        if len(self._outcomes) > OUTCOMES_REMEMBERED:
            del self._outcomes[next(iter(self._outcomes))]
        await self._out(Unshown(event_id=event_id, reason=reason, detail=detail))

    async def _metrics(self) -> None:
        while True:
            await asyncio.sleep(self._every_s)
            await self._out(self._figures())
