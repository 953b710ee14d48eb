"""OpenTelemetry traces: a span per user turn and per Director run, made from the stage records.

Off by default, and then nothing of it runs (no sink on any tracer). With the standard variable
``OTEL_TRACES_EXPORTER`` set (``console``, ``otlp``, or the name of any exporter installed under the
SDK's ``opentelemetry_traces_exporter`` entry point; several separated by commas; ``none`` is off), the
server sends its spans there in batches; each exporter reads its own standard variables
(``OTEL_EXPORTER_OTLP_ENDPOINT``...), the resource ``OTEL_SERVICE_NAME`` (default ``onstage``) and
``OTEL_RESOURCE_ATTRIBUTES``. It needs the ``otel`` extra (opentelemetry-sdk).

The spans are made from each session's stage records (``events.tracing``), watched through the tracer's
sink, so nothing on the session's path waits for them:

- ``onstage.turn``: from the user's input (the end of their speech, or the arrival of a typed text or a
  gesture) to the first audible sample of the character's answer, with the latency attributes voice
  agent users chart (end-to-end turn latency, end-of-turn and transcription delay, time to first token,
  time to first audio; under onstage's names and LiveKit's and Pipecat's), onstage's own time to the
  first visible reaction, and an event for every stage. It opens when a Director run or a speech
  starts answering the input, and ends at the answer's first audio; a turn that gets no voice ends with
  ``onstage.turn.spoken`` false at its last stage, when the session's next turn opens or it ends.
- ``onstage.director.run``: a Director run answering an input (the child of that input's turn), with
  the time to first token and the LLM's reply time.
"""

from __future__ import annotations

import logging
import os
import time
from collections import OrderedDict
from collections.abc import Mapping
from importlib.metadata import entry_points
from typing import TYPE_CHECKING

from events.tracing import (
    ARRIVED,
    AUDIO_SENT,
    DIRECTOR_DONE,
    DIRECTOR_RUN,
    LLM_DONE,
    LLM_FIRST_TOKEN,
    LLM_REQUEST,
    SENT,
    SPEECH_CUED,
    SPEECH_END,
    SPEECH_SYNTHESISED,
    TRANSCRIBED,
    TURN_ENDED,
    TURN_STAGES,
    Tracer,
)

if TYPE_CHECKING:
    from opentelemetry.trace import Span, TracerProvider

log = logging.getLogger(__name__)

TURN_ATTRIBUTES: tuple[tuple[tuple[str, ...], str | None, str], ...] = (
    (("onstage.turn.e2e_latency", "lk.e2e_latency", "turn.user_bot_latency_seconds"), None, AUDIO_SENT),
    (("onstage.turn.reaction_latency",), None, SENT),
    (("onstage.turn.end_of_turn_delay", "lk.end_of_turn_delay"), SPEECH_END, TURN_ENDED),
    (("onstage.turn.transcription_delay", "lk.transcription_delay"), SPEECH_END, TRANSCRIBED),
    (("onstage.llm.ttft", "lk.response.ttft"), LLM_REQUEST, LLM_FIRST_TOKEN),
    (("onstage.llm.duration",), LLM_REQUEST, LLM_DONE),
    (("onstage.tts.ttfb", "lk.response.ttfb"), SPEECH_CUED, SPEECH_SYNTHESISED),
)
"""Seconds between two stages, under these names; a start of None is the turn's own start."""
RUN_ATTRIBUTES = TURN_ATTRIBUTES[4:6]
RUN_STAGES = (DIRECTOR_RUN, LLM_REQUEST, LLM_FIRST_TOKEN, LLM_DONE, DIRECTOR_DONE)
_WATCHED = frozenset((DIRECTOR_RUN, DIRECTOR_DONE, SPEECH_CUED, AUDIO_SENT))

OPEN_PER_SESSION = 16
"""Open spans a session holds at most (a turn waiting for its voice, a run in flight): the oldest is
ended when more open, so a session that never answers cannot grow them."""


class TurnTelemetry:
    """Spans of the sessions it ``watch``es, through ``provider`` (``from_env`` makes one as configured)."""

    def __init__(self, provider: TracerProvider, *, owned: bool = False) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer("onstage")
        self._owned = owned
        self._sessions: dict[str, _SessionSpans] = {}
        # Stages are monotonic; spans want wall-clock time. One offset keeps a session's spans in step.
        self._wall_offset_ns = time.time_ns() - time.monotonic_ns()

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> TurnTelemetry | None:
        """The telemetry ``OTEL_TRACES_EXPORTER`` asks for, or None (unset, ``none``, or the SDK or an
        exporter named is not installed: logged, and the server runs without traces)."""
        env = os.environ if env is None else env
        names = [n.strip() for n in env.get("OTEL_TRACES_EXPORTER", "").split(",") if n.strip()]
        if not names or names == ["none"]:
            return None
        try:
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider as SdkProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
        except ImportError:
            log.warning("OTEL_TRACES_EXPORTER is set but opentelemetry-sdk is not installed: no traces")
            return None
        exporters = []
        for name in names:
            found = entry_points(group="opentelemetry_traces_exporter", name=name)
            if not found:
                log.warning("OTEL_TRACES_EXPORTER names %r, which is not installed: left out", name)
                continue
            exporters.append(next(iter(found)).load()())
        if not exporters:
            return None
        resource = Resource.create({"service.name": env.get("OTEL_SERVICE_NAME", "onstage")})
        provider = SdkProvider(resource=resource)
        for exporter in exporters:
            provider.add_span_processor(BatchSpanProcessor(exporter))
        return cls(provider, owned=True)

    def watch(self, session_id: str, tracer: Tracer) -> None:
        """Make spans from ``tracer``'s records (one session's) from now on."""
        spans = _SessionSpans(self, session_id, tracer)
        self._sessions[session_id] = spans
        tracer.add_sink(spans.on_record)

    def end(self, session_id: str) -> None:
        """The session ended: its open spans end at their last stage."""
        spans = self._sessions.pop(session_id, None)
        if spans is not None:
            spans.close()

    def shutdown(self) -> None:
        """End every session's spans and, for a provider of its own, export what is left."""
        for session_id in list(self._sessions):
            self.end(session_id)
        if self._owned:
            shutdown = getattr(self.provider, "shutdown", None)
            if shutdown is not None:
                shutdown()

    def wall_ns(self, t_ns: int) -> int:
        """A monotonic time as OpenTelemetry's (ns since the epoch)."""
        return t_ns + self._wall_offset_ns


class _SessionSpans:
    """The open spans of one session, opened and ended as its stages are recorded."""

    def __init__(self, telemetry: TurnTelemetry, session_id: str, tracer: Tracer) -> None:
        self.telemetry = telemetry
        self.session_id = session_id
        self.records = tracer
        self.turns: OrderedDict[str, Span] = OrderedDict()
        self.runs: OrderedDict[str, Span] = OrderedDict()

    def on_record(self, event_id: str, stage: str, t_ns: int) -> None:
        if stage not in _WATCHED:
            return
        if stage in (DIRECTOR_RUN, SPEECH_CUED) and event_id not in self.turns:
            self._open_turn(event_id)
        if stage == DIRECTOR_RUN:
            self._open_run(event_id, t_ns)
        elif stage == DIRECTOR_DONE and (run := self.runs.pop(event_id, None)) is not None:
            self._end(run, event_id, RUN_ATTRIBUTES, RUN_STAGES, None, t_ns)
        elif stage == AUDIO_SENT and (turn := self.turns.pop(event_id, None)) is not None:
            turn.set_attribute("onstage.turn.spoken", True)
            self._end(turn, event_id, TURN_ATTRIBUTES, TURN_STAGES, self._start(event_id), t_ns)

    def _start(self, event_id: str) -> int:
        stages = self.records.stages(event_id)
        return stages.get(SPEECH_END, stages.get(ARRIVED, time.monotonic_ns()))

    def _open_turn(self, event_id: str) -> None:
        for earlier in list(self.turns):
            self._end_unspoken(earlier)  # a session's turns follow one another: an older one is over
        kind = self.records.kind(event_id) or "unknown"
        attributes = {
            "onstage.session.id": self.session_id,
            "onstage.turn.id": event_id,
            "onstage.input": kind,
        }
        self.turns[event_id] = self.telemetry.tracer.start_span(
            "onstage.turn", start_time=self.telemetry.wall_ns(self._start(event_id)), attributes=attributes
        )

    def _open_run(self, event_id: str, t_ns: int) -> None:
        from opentelemetry.trace import set_span_in_context

        parent = self.turns.get(event_id)
        self.runs[event_id] = self.telemetry.tracer.start_span(
            "onstage.director.run",
            context=set_span_in_context(parent) if parent is not None else None,
            start_time=self.telemetry.wall_ns(t_ns),
            attributes={"onstage.session.id": self.session_id, "onstage.turn.id": event_id},
        )
        while len(self.runs) > OPEN_PER_SESSION:
            old_id, old = self.runs.popitem(last=False)
            self._end(old, old_id, RUN_ATTRIBUTES, RUN_STAGES, None, None)

    def _end_unspoken(self, event_id: str) -> None:
        turn = self.turns.pop(event_id)
        turn.set_attribute("onstage.turn.spoken", False)
        self._end(turn, event_id, TURN_ATTRIBUTES, TURN_STAGES, self._start(event_id), None)

    def _end(
        self,
        span: Span,
        event_id: str,
        attributes: tuple[tuple[tuple[str, ...], str | None, str], ...],
        stages: tuple[str, ...],
        start: int | None,
        end_ns: int | None,
    ) -> None:
        """Set the span's latencies and stage events from the records, and end it at ``end_ns`` (None: at
        its last stage recorded)."""
        held = self.records.stages(event_id)
        wall = self.telemetry.wall_ns
        for names, first, last in attributes:
            a = start if first is None else held.get(first)
            b = held.get(last)
            if a is not None and b is not None:
                for name in names:
                    span.set_attribute(name, (b - a) / 1e9)
        shown = sorted((t, stage) for stage, t in held.items() if stage in stages)
        for t, stage in shown:
            span.add_event(stage, timestamp=wall(t))
        if end_ns is None:
            end_ns = shown[-1][0] if shown else time.monotonic_ns()
        span.end(end_time=wall(end_ns))

    def close(self) -> None:
        for event_id in list(self.turns):
            self._end_unspoken(event_id)
        for event_id, run in list(self.runs.items()):
            self._end(run, event_id, RUN_ATTRIBUTES, RUN_STAGES, None, None)
        self.runs.clear()
