"""Tracing hooks: when each component handled each event, for event-to-reaction latency.

The bus records every event's arrival (its ``t_ns``) and publication. Any component records its own stage
(``tracer.record(event.id, "reflex")``); ``latency_ms`` then gives the time between two stages. Memory is
bounded: only the most recent ``max_events`` events are kept.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

from events.vocabulary import Event

ARRIVED = "arrived"
PUBLISHED = "published"

Sink = Callable[[str, str, int], None]


class Tracer:
    """A bounded record of (event id, stage) -> monotonic time in ns."""

    def __init__(self, max_events: int = 10_000) -> None:
        if max_events < 1:
            raise ValueError(f"max_events must be at least 1, got {max_events}")
        self.max_events = max_events
        self._stages: OrderedDict[str, dict[str, int]] = OrderedDict()
        self._kinds: dict[str, str] = {}  # event id -> its type's tag, for the events published
        self._sinks: list[Sink] = []

    def add_sink(self, sink: Sink) -> None:
        """Call ``sink(event_id, stage, t_ns)`` on every record (for logs or metrics)."""
        self._sinks.append(sink)

    def record(self, event_id: str, stage: str, t_ns: int | None = None) -> None:
        """Note that ``stage`` handled ``event_id`` now (or at ``t_ns``); the first record of a stage wins."""
        t = time.monotonic_ns() if t_ns is None else t_ns
        stages = self._stages.get(event_id)
        if stages is None:
            stages = self._stages[event_id] = {}
            if len(self._stages) > self.max_events:
                evicted, _ = self._stages.popitem(last=False)
                self._kinds.pop(evicted, None)
        if stage in stages:
            return
        stages[stage] = t
        for sink in self._sinks:
            sink(event_id, stage, t)

    def record_event(self, event: Event) -> None:
        """Record an event's arrival (its own ``t_ns``) and its publication (now)."""
        self.record(event.id, ARRIVED, event.t_ns)
        self.record(event.id, PUBLISHED)
        if event.id in self._stages:
            self._kinds[event.id] = str(type(event).__struct_config__.tag)

    def kind(self, event_id: str) -> str | None:
        """The type (its tag, e.g. ``gesture``) of a published event still held, else None."""
        return self._kinds.get(event_id)

    def stages(self, event_id: str) -> dict[str, int]:
        """Every stage recorded for ``event_id`` (empty if unknown or evicted)."""
        return dict(self._stages.get(event_id, {}))

    def latency_ms(self, event_id: str, end: str, start: str = ARRIVED) -> float | None:
        """Milliseconds from stage ``start`` to stage ``end`` of an event, or None if either is missing."""
        stages = self._stages.get(event_id)
        if stages is None or start not in stages or end not in stages:
            return None
        return (stages[end] - stages[start]) / 1e6

    def __len__(self) -> int:
        return len(self._stages)
