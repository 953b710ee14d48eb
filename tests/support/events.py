"""A list of events as the one kind its source makes: what a test knows and mypy cannot."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

from events.vocabulary import Event

E = TypeVar("E", bound=Event)


def only(kind: type[E], events: Iterable[Event]) -> list[E]:
    """``events`` as a list of ``kind``; fails the test on any event of another kind."""
    found: list[E] = []
    for event in events:
        assert isinstance(event, kind), f"expected only {kind.__name__}, got {event!r}"
        found.append(event)
    return found
