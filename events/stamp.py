"""Stamping: giving each new event of a session its id and monotonic arrival time."""

from __future__ import annotations

import time
from typing import Any, TypeVar

from events.vocabulary import Event

E = TypeVar("E", bound=Event)


class Stamper:
    """Makes the events of one session: ids ``<prefix><n>`` counting from 1, arrival time now.

    ``stamper(SpeechStarted, audio_ms=120.0)`` returns a ``SpeechStarted`` with ``id``, ``session`` and
    ``t_ns`` filled in. Pass ``t_ns`` to stamp an event that arrived earlier than it is made.
    """

    def __init__(self, session: str, prefix: str = "e", issued: int = 0) -> None:
        """``issued``: ids already given out for this session (elsewhere): numbering goes on after them."""
        self.session = session
        self._prefix = prefix
        self.issued = issued
        """How many ids this session has given out."""

    def next_id(self) -> str:
        """Reserve the next event id of this session."""
        self.issued += 1
        return f"{self._prefix}{self.issued}"

    def __call__(self, event_type: type[E], *, t_ns: int | None = None, **fields: Any) -> E:
        return event_type(
            id=self.next_id(),
            session=self.session,
            t_ns=time.monotonic_ns() if t_ns is None else t_ns,
            **fields,
        )
