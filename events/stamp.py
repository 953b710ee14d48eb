"""Stamping: giving each new event of a session its id and monotonic arrival time."""

from __future__ import annotations

import itertools
import time
from typing import Any, TypeVar

from events.vocabulary import Event

E = TypeVar("E", bound=Event)


class Stamper:
    """Makes the events of one session: ids ``<prefix><n>`` counting from 1, arrival time now.

    ``stamper(SpeechStarted, audio_ms=120.0)`` returns a ``SpeechStarted`` with ``id``, ``session`` and
    ``t_ns`` filled in. Pass ``t_ns`` to stamp an event that arrived earlier than it is made.
    """

    def __init__(self, session: str, prefix: str = "e") -> None:
        self.session = session
        self.prefix = prefix
        """What every id starts with (a session taken over by another front end numbers its ids anew
        under a prefix of its own there, so they never repeat an id the first front end gave out)."""
        self._counter = itertools.count(1)

    def next_id(self) -> str:
        """Reserve the next event id of this session."""
        return f"{self.prefix}{next(self._counter)}"

    def __call__(self, event_type: type[E], *, t_ns: int | None = None, **fields: Any) -> E:
        return event_type(
            id=self.next_id(),
            session=self.session,
            t_ns=time.monotonic_ns() if t_ns is None else t_ns,
            **fields,
        )
