"""Hunches: an input a listener expects, told as soon as it is heard and before it is confirmed.

The onset detector judges a candidate 50-60 ms after hearing it, the voice detector a speech segment once it
has lasted 64 ms and carries a pitch: the event comes that late. A listener that can tell such a candidate
at once does so as a ``Hunch`` (``take_hunches``), and tells it again, ``dropped``, where no event comes of
it. Hunches are not events: nothing is published on them, no client sees them. What the server does with
one is prepare a reaction to show if the event comes (``server.core.foresight``).
"""

from __future__ import annotations

from typing import Literal, Protocol, runtime_checkable

import msgspec

HunchKind = Literal["sound.onset", "speech.started"]


class Hunch(msgspec.Struct, frozen=True, kw_only=True):
    """An expected ``kind`` of event (its tag) at ``audio_ms`` in the stream, which comes ``confirm_ms``
    after this is told at the soonest; ``dropped`` once it is known not to come."""

    kind: HunchKind
    audio_ms: float
    confirm_ms: float
    strength_db: float = 0.0
    """For an onset: its hop's height above the noise floor."""
    dropped: bool = False


@runtime_checkable
class Hunching(Protocol):
    """A listener that tells hunches."""

    def take_hunches(self) -> list[Hunch]:
        """The hunches told since the last call, in order."""
        ...
