"""What the realizer tells the session's bus: block progress, the character's speech and inputs that will
not show, published at once or held back while a re-decision is open."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from agent.progress import CharacterSpeech, InputUnshown, UnshownReason
from agent.realizer_state import Entry, Voice
from events.bus import EventBus
from events.stamp import Stamper
from events.vocabulary import Event


class Reporter:
    """Stamps and publishes one realizer's events (with no bus, they go nowhere); ``clock`` gives the last
    chunk ticked, which progress and speech events carry."""

    def __init__(self, bus: EventBus | None, stamp: Stamper, clock: Callable[[], int]) -> None:
        self.bus = bus
        self._stamp = stamp
        self._clock = clock
        self._held: list[Event] | None = None

    def hold(self) -> None:
        """Keep every event from now on until ``release`` (a re-decision that may be discarded)."""
        self._held = []

    def release(self) -> list[Event]:
        """Stop holding events; returns those held, unpublished (``publish`` them to let them out)."""
        held, self._held = self._held or [], None
        return held

    def publish(self, event: Event) -> None:
        """Publish ``event`` now, or hold it while a hold is on."""
        if self._held is not None:
            self._held.append(event)
        elif self.bus is not None:
            self.bus.publish_nowait(event)

    def plan(self, kind: type[Event], entry: Entry, **fields: Any) -> None:
        """Publish block progress ``kind`` of ``entry``'s block with ``fields``."""
        block = entry.block
        self.publish(
            self._stamp(
                kind,
                block_id=block.id,
                source=block.source,
                epoch=block.epoch,
                chunk=max(self._clock(), 0),
                label=block.label,
                **fields,
            )
        )

    def speech(
        self,
        entry: Entry,
        voice: Voice,
        state: Literal["started", "ended", "interrupted"],
        heard_text: str | None = None,
    ) -> None:
        """Publish ``CharacterSpeech`` ``state`` of ``voice`` (speech that ended was heard whole)."""
        self.publish(
            self._stamp(
                CharacterSpeech,
                speech_id=voice.speech_id,
                block_id=entry.block.id,
                source=entry.block.source,
                text=voice.behavior.text,
                state=state,
                heard_text=voice.behavior.text if state == "ended" else heard_text,
                chunk=max(self._clock(), 0),
            )
        )

    def unshown(self, cause: str, reason: UnshownReason, detail: str) -> None:
        """Publish that input ``cause`` will not show, and why."""
        self.publish(self._stamp(InputUnshown, cause=cause, reason=reason, detail=detail))
