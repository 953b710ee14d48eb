"""Voice-to-voice latency on /metrics: the user asks a question aloud (Piper audio, streamed in real time to
a real server on loopback), Whisper transcribes it, a real local chat-completions endpoint answers with
speech, and the histogram across sessions counts the turn once, from the end of the user's speech to the
first audible sample of the answer sent. A typed question is no voice-to-voice turn."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import pytest_asyncio

from server.app import OnstageServer
from server.client import SessionClient
from server.demo_audio import noise, speech
from server.limits import Limits
from server.sessions import SessionFactory
from tests.support.llm_server import Call, LLMServer, Reply
from tests.support.microphone import FRAME_S, speak_into
from tests.support.observe import Families, families, metrics_text, observations
from tests.support.serving import directed

pytestmark = pytest.mark.asyncio(loop_scope="module")

FAMILY = "onstage_voice_to_voice_seconds"


# Each test has its own endpoint and server: a Director call that a test's session makes as it ends
# (a transcript still on its way) must not take the next test's scripted answers.
@pytest_asyncio.fixture(loop_scope="module")
async def llm():
    async with LLMServer() as server:
        yield server


@pytest_asyncio.fixture(loop_scope="module")
async def server(llm: LLMServer, factory: SessionFactory):
    factory = directed(factory, llm)
    srv = OnstageServer(factory, Limits(admission="ceiling", max_sessions=2, resume_grace_s=0.2))
    await srv.start("127.0.0.1", 0)
    yield srv
    await srv.close()


def voiced_at(client: SessionClient) -> float | None:
    """When the first audio-out frame with a sound in it arrived."""
    return next((a.t for a in client.received.audio if np.frombuffer(a.pcm, "<i2").any()), None)


async def scrape(server: OnstageServer) -> Families:
    return families(await asyncio.to_thread(metrics_text, server.port))


async def test_a_spoken_turn_is_counted_once_from_the_end_of_the_speech_to_the_answer_s_voice(
    server: OnstageServer, llm: LLMServer
) -> None:
    before = await scrape(server)
    llm.enqueue(Reply(tool_calls=[Call("say", {"text": "I am Pip."})]), Reply(text=""))
    question = speech("What is your name?", sampling_noise=False)
    audio = np.concatenate([noise(0.5, 0.002), question, noise(1.5, 0.002)])
    async with SessionClient(f"ws://127.0.0.1:{server.port}/v1/session") as client:
        await client.start(director="llm", seed=3)
        sent = await speak_into(client, audio)
        stopped = await client.wait_type("input.speech_stopped", timeout=30)
        await client.wait_type("character.speech", state="ended", timeout=30)
        after = await scrape(server)

    added = observations(before, after, FAMILY)
    assert added["count"] == 1
    # The server's figure is at most what the client saw, from the moment it sent the end of the speech
    # (as the server's ears placed it) to the first voiced audio it received: the server places the end
    # no earlier than the audio's arrival, within a frame, and it sends the voice before the client has it.
    end_sent = sent.when(round(stopped["audio_ms"] * 16))
    voiced = voiced_at(client)
    assert voiced is not None
    assert 0 < added["sum"] <= voiced - end_sent + 2 * FRAME_S
    # The one observation sits in the first bucket that holds its value.
    buckets = sorted((float(le), n) for le, n in added.items() if le not in ("count", "sum"))
    assert next(le for le, n in buckets if n == 1) >= added["sum"]
    assert all(n == 0 for le, n in buckets if le < added["sum"])
    assert all("session" not in dict(labels) for _, labels in after[FAMILY])


async def test_an_answer_to_typed_text_is_no_voice_to_voice_turn(
    server: OnstageServer, llm: LLMServer
) -> None:
    before = await scrape(server)
    llm.enqueue(Reply(tool_calls=[Call("say", {"text": "Hello!"})]), Reply(text=""))
    async with SessionClient(f"ws://127.0.0.1:{server.port}/v1/session") as client:
        await client.start(director="llm", seed=5)
        await client.send({"type": "input.text", "text": "Hi there"})
        await client.wait_type("character.speech", state="ended", timeout=30)
        assert voiced_at(client) is not None  # it answered aloud
        after = await scrape(server)
    assert observations(before, after, FAMILY)["count"] == 0
