"""OpenTelemetry traces of a real session: the user asks a question aloud (Piper audio, streamed in real
time to a real server on loopback), Whisper transcribes it, a real local chat-completions endpoint
answers, and the SDK's in-memory exporter receives a span for the turn and one for the Director run."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np
import pytest
import pytest_asyncio
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from events.tracing import TURN_STAGES
from server.app import OnstageServer
from server.client import SessionClient
from server.demo_audio import noise, speech
from server.limits import Limits
from server.otel import TurnTelemetry
from server.sessions import SessionFactory
from tests.support.llm_server import Call, LLMServer, Reply
from tests.support.microphone import FRAME_S, speak_into
from tests.support.serving import directed

pytestmark = pytest.mark.asyncio(loop_scope="module")


# Each test has its own endpoint and server: a Director call that a test's session makes as it ends
# (a transcript still on its way) must not take the next test's scripted answers.
@pytest_asyncio.fixture(loop_scope="module")
async def llm():
    async with LLMServer() as server:
        yield server


class Exporter(InMemorySpanExporter):
    """The SDK's in-memory exporter, which also wakes whoever waits for a span (spans end on the loop)."""

    def __init__(self) -> None:
        super().__init__()
        self.exported = asyncio.Event()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = super().export(spans)
        self.exported.set()
        return result


@pytest.fixture(scope="module")
def exporter() -> Exporter:
    return Exporter()


@pytest_asyncio.fixture(loop_scope="module")
async def url(llm: LLMServer, factory: SessionFactory, exporter: Exporter):
    factory = directed(factory, llm)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    srv = OnstageServer(
        factory,
        Limits(admission="ceiling", max_sessions=2, resume_grace_s=0.2),
        telemetry=TurnTelemetry(provider),
    )
    await srv.start("127.0.0.1", 0)
    yield f"ws://127.0.0.1:{srv.port}/v1/session"
    await srv.close()


async def spans_named(exporter: Exporter, name: str, timeout: float = 30.0) -> list[ReadableSpan]:
    """The finished spans called ``name``, once there is one."""
    async with asyncio.timeout(timeout):
        while not (found := [s for s in exporter.get_finished_spans() if s.name == name]):
            exporter.exported.clear()
            await exporter.exported.wait()
    return found


def seconds(span: ReadableSpan) -> dict[str, float]:
    """A span's latency attributes."""
    return {k: v for k, v in (span.attributes or {}).items() if isinstance(v, float)}


def voiced_at(client: SessionClient) -> float | None:
    """When the first audio-out frame with a sound in it arrived."""
    return next((a.t for a in client.received.audio if np.frombuffer(a.pcm, "<i2").any()), None)


async def test_a_spoken_turn_makes_a_turn_span_with_its_stages_and_a_director_run_inside_it(
    url: str, llm: LLMServer, exporter: Exporter
) -> None:
    exporter.clear()
    llm.enqueue(Reply(tool_calls=[Call("say", {"text": "I am Pip."})]), Reply(text=""))
    question = speech("What is your name?", sampling_noise=False)
    audio = np.concatenate([noise(0.5, 0.002), question, noise(1.5, 0.002)])
    async with SessionClient(url) as client:
        await client.start(director="llm", seed=3)
        sent = await speak_into(client, audio)
        stopped = await client.wait_type("input.speech_stopped", timeout=30)
        await client.wait_type("character.speech", state="started", timeout=30)
        await client.wait_frame(lambda _: voiced_at(client) is not None, timeout=30)
        (turn,) = await spans_named(exporter, "onstage.turn")
        (run,) = await spans_named(exporter, "onstage.director.run")

    attributes = turn.attributes or {}
    assert attributes["onstage.input"] == "turn.ended"
    assert attributes["onstage.turn.spoken"] is True
    # Every stage of the turn was recorded, in the order the work happens.
    events = [e.name for e in turn.events]
    assert set(events) == set(TURN_STAGES)
    # The first visible reaction may come at any point, and the run may end before or after its speech is
    # cued (the LLM is asked once more after the say).
    free = ("sent", "director.done")
    assert [e for e in events if e not in free] == [s for s in TURN_STAGES if s not in free]
    assert turn.start_time is not None and turn.end_time is not None
    figures = seconds(turn)
    e2e = figures["onstage.turn.e2e_latency"]
    assert e2e == pytest.approx((turn.end_time - turn.start_time) / 1e9, abs=1e-6)
    assert figures["lk.e2e_latency"] == figures["turn.user_bot_latency_seconds"] == e2e
    for name in ("end_of_turn_delay", "transcription_delay"):
        assert 0 < figures[f"onstage.turn.{name}"] < e2e
    assert 0 < figures["onstage.llm.ttft"] <= figures["onstage.llm.duration"] < e2e
    assert 0 < figures["onstage.tts.ttfb"] < e2e
    assert 0 < figures["onstage.turn.reaction_latency"]
    # The server's figure is at most what the client saw, from the moment it sent the end of the speech
    # (as the server's ears placed it) to the first voiced audio it received: the server places the end
    # no earlier than the audio's arrival, within a frame, and it sends the voice before the client has it.
    end_sent = sent.when(round(stopped["audio_ms"] * 16))
    voiced = voiced_at(client)
    assert voiced is not None
    assert e2e <= voiced - end_sent + 2 * FRAME_S

    # The Director's run is the turn's child, with its own time to first token.
    assert run.parent is not None and run.parent.span_id == turn.context.span_id
    assert run.context.trace_id == turn.context.trace_id
    assert run.start_time is not None and run.end_time is not None
    assert turn.start_time < run.start_time < run.end_time
    assert (run.attributes or {})["onstage.turn.id"] == attributes["onstage.turn.id"]
    assert seconds(run)["onstage.llm.ttft"] == figures["onstage.llm.ttft"]


async def test_a_typed_question_is_a_turn_from_its_arrival(
    url: str, llm: LLMServer, exporter: Exporter
) -> None:
    exporter.clear()
    llm.enqueue(Reply(tool_calls=[Call("say", {"text": "Hello!"})]), Reply(text=""))
    async with SessionClient(url) as client:
        await client.start(director="llm", seed=5)
        await client.send({"type": "input.text", "text": "Hi there"})
        accepted = await client.wait_type("input.accepted")
        (turn,) = await spans_named(exporter, "onstage.turn")
    attributes = turn.attributes or {}
    assert attributes["onstage.turn.id"] == accepted["event_id"]
    assert attributes["onstage.input"] == "text"
    # No speech and no transcript: those stages are absent, the rest are there.
    events = {e.name for e in turn.events}
    assert "turn.speech_end" not in events and "turn.transcribed" not in events
    assert {"llm.first_token", "speech.synthesised", "audio.sent"} <= events
    figures = seconds(turn)
    assert "onstage.turn.transcription_delay" not in figures
    assert figures["onstage.turn.e2e_latency"] > figures["onstage.llm.ttft"] > 0


async def test_traces_are_off_unless_an_exporter_is_named() -> None:
    assert TurnTelemetry.from_env({}) is None
    assert TurnTelemetry.from_env({"OTEL_TRACES_EXPORTER": "none"}) is None
    assert TurnTelemetry.from_env({"OTEL_TRACES_EXPORTER": "no-such-exporter"}) is None
    telemetry = TurnTelemetry.from_env({"OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "stage-7"})
    assert telemetry is not None
    assert isinstance(telemetry.provider, TracerProvider)
    assert telemetry.provider.resource.attributes["service.name"] == "stage-7"
    telemetry.shutdown()
