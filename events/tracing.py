"""Tracing hooks: when each component handled each event, for event-to-reaction latency.

The bus records every event's arrival (its ``t_ns``) and publication. Any component records its own stage
(``tracer.record(event.id, "reflex")``); ``latency_ms`` then gives the time between two stages. Memory is
bounded: only the most recent ``max_events`` events are kept.

A user's turn is followed end to end under one id, the input the Director answers (the ``EndOfTurn``,
or a transcript that came after its turn ended): the stages below, in the order they happen. The bus
records the first three from the ``EndOfTurn`` itself; the Director, the speech player and media out
record theirs under the cause of what they do, so a scripted answer or a reply to typed text is traced
the same way from its own input on.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

from events.vocabulary import EndOfTurn, Event

ARRIVED = "arrived"
PUBLISHED = "published"
SENT = "sent"
"""The first video frame that reflects the event went out: its visible reaction."""

SPEECH_END = "turn.speech_end"
"""The user's speech ended (``EndOfTurn.speech_end_ns``)."""
TRANSCRIBED = "turn.transcribed"
"""The turn's last final transcript arrived."""
TURN_ENDED = "turn.ended"
"""The end of the turn was decided."""
DIRECTOR_RUN = "director.run"
"""A Director run answering the input began."""
LLM_REQUEST = "llm.request"
"""Its first chat-completions request was sent."""
LLM_FIRST_TOKEN = "llm.first_token"
"""The first piece of the reply (text or a tool call) arrived."""
LLM_DONE = "llm.done"
"""The first reply was complete."""
DIRECTOR_DONE = "director.done"
"""The run ended (done, cancelled or failed)."""
SPEECH_CUED = "speech.cued"
"""The first speech caused by the input was cued in a chunk's decision."""
SPEECH_SYNTHESISED = "speech.synthesised"
"""Its first sentence was synthesised."""
AUDIO_SENT = "audio.sent"
"""Its first audible sample went out, with the frame it belongs to."""
TURN_STAGES = (
    SPEECH_END,
    TRANSCRIBED,
    TURN_ENDED,
    DIRECTOR_RUN,
    LLM_REQUEST,
    LLM_FIRST_TOKEN,
    LLM_DONE,
    DIRECTOR_DONE,
    SPEECH_CUED,
    SPEECH_SYNTHESISED,
    AUDIO_SENT,
    SENT,
)

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

    def record(self, event_id: str, stage: str, t_ns: int | None = None) -> bool:
        """Note that ``stage`` handled ``event_id`` now (or at ``t_ns``); the first record of a stage wins
        (whether this was it is returned)."""
        t = time.monotonic_ns() if t_ns is None else t_ns
        stages = self._stages.get(event_id)
        if stages is None:
            stages = self._stages[event_id] = {}
            if len(self._stages) > self.max_events:
                evicted, _ = self._stages.popitem(last=False)
                self._kinds.pop(evicted, None)
        if stage in stages:
            return False
        stages[stage] = t
        for sink in self._sinks:
            sink(event_id, stage, t)
        return True

    def record_event(self, event: Event) -> None:
        """Record an event's arrival (its own ``t_ns``) and its publication (now); for an ``EndOfTurn``,
        the turn's first stages too."""
        if isinstance(event, EndOfTurn):
            if event.speech_end_ns is not None:
                self.record(event.id, SPEECH_END, event.speech_end_ns)
            if event.transcript_ns is not None:
                self.record(event.id, TRANSCRIBED, event.transcript_ns)
            self.record(event.id, TURN_ENDED, event.t_ns)
        self.record(event.id, ARRIVED, event.t_ns)
        self.record(event.id, PUBLISHED)
        if event.id in self._stages:
            self._kinds[event.id] = str(type(event).__struct_config__.tag)

    def copy(self, source: str, target: str, stages: tuple[str, ...]) -> None:
        """Record ``stages`` of ``source`` (those held) for ``target`` too: an input that carries on
        another's trace (a transcript that came after its turn ended answers that turn)."""
        held = self._stages.get(source, {})
        for stage in stages:
            if stage in held:
                self.record(target, stage, held[stage])

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
