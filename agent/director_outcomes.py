"""What the Director owes the user's inputs: the event that asked for an answer, carried from run to run
until a plan answers it and acknowledged (``agent.acknowledge``) once when none does; and the notice,
for each input that will not show, of why (``InputUnshown``)."""

from __future__ import annotations

from dataclasses import dataclass

from agent.acknowledge import Acknowledgement
from agent.plans import Block
from agent.progress import InputUnshown, UnshownReason
from events.bus import EventBus
from events.stamp import Stamper
from events.vocabulary import Event


@dataclass
class Owed:
    """A user event that asked for an answer, and whether the character has acknowledged it yet."""

    event: Event
    acknowledged: bool = False


class Outcomes:
    """The event owed an answer, before and during the run that takes it up, and the notices."""

    def __init__(self, bus: EventBus | None, stamp: Stamper, acknowledgement: Acknowledgement) -> None:
        """``stamp``: the Director's own, so that its events are numbered in one sequence."""
        self.bus = bus
        self.stamp = stamp
        self.acknowledgement = acknowledgement
        self.owed: Owed | None = None
        """The latest user event that asked for an answer and that no run has taken up yet."""
        self.run_owed: Owed | None = None
        """The one the run in flight took up."""

    def owe(self, event: Event) -> None:
        """``event`` asks for an answer: the next run owes it (instead of any older one)."""
        self.owed = Owed(event)

    def take_up(self) -> None:
        """A run starts: it owes what is owed, and nothing is owed to the next one yet."""
        self.run_owed, self.owed = self.owed, None

    def run_ended(self) -> Owed | None:
        """The run in flight ended: what it owed, if anything."""
        owed, self.run_owed = self.run_owed, None
        return owed

    def carry(self, owed: Owed | None) -> None:
        """The next run owes ``owed`` still, unless a newer event is owed already."""
        if self.owed is None:
            self.owed = owed

    def acknowledging(self, owed: Owed) -> Block | None:
        """The block that shows the user they were heard; None when ``owed`` was acknowledged already
        (once per event)."""
        if owed.acknowledged:
            return None
        owed.acknowledged = True
        return self.acknowledgement.block(owed.event)

    def unshown(self, causes: tuple[str, ...], reason: UnshownReason, detail: str) -> None:
        """Tell the client, through the bus, that each of ``causes`` will not show, and why."""
        if self.bus is not None:
            for cause in causes:
                self.bus.publish_nowait(self.stamp(InputUnshown, cause=cause, reason=reason, detail=detail))
