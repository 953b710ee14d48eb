"""A whole session with an LLM Director: real server, real WebSocket, real listeners, a real local
chat-completions endpoint. The user speaks (Piper audio), the server hears and transcribes it, the
Director answers with streamed tool calls, and the character's voice and actions come back."""

from __future__ import annotations

import asyncio
import warnings

import numpy as np
import pytest
import pytest_asyncio

from server.app import OnstageServer
from server.client import SessionClient, VideoFrame
from server.demo_audio import noise, speech
from server.limits import Limits
from server.sessions import SessionFactory
from server.voice import OUTPUT_RATE
from streaming_model.probes import measure
from tests.support.llm_server import Call, LLMServer, Reply
from tests.support.microphone import speak_into
from tests.support.observe import arrived
from tests.support.serving import directed

pytestmark = pytest.mark.asyncio(loop_scope="module")


# Each test has its own endpoint and server: a Director call that a test's session makes as it ends
# (a transcript still on its way) must not take the next test's scripted answers.
@pytest_asyncio.fixture(loop_scope="module")
async def llm():
    async with LLMServer() as server:
        yield server


@pytest_asyncio.fixture(loop_scope="module")
async def url(llm: LLMServer, factory: SessionFactory):
    factory = directed(factory, llm)
    srv = OnstageServer(factory, Limits(admission="ceiling", max_sessions=2, resume_grace_s=0.2))
    await srv.start("127.0.0.1", 0)
    yield f"ws://127.0.0.1:{srv.port}/v1/session"
    await srv.close()


def loud(client: SessionClient, after_pts: float) -> float:
    """Peak level of the character's audio sent after ``after_pts`` ms."""
    chunks = [np.frombuffer(a.pcm, "<i2") for a in client.received.audio if a.header["pts_ms"] > after_pts]
    return float(np.abs(np.concatenate(chunks)).max()) / 32768 if chunks else 0.0


async def test_a_spoken_question_gets_a_spoken_answer_and_an_action(url: str, llm: LLMServer) -> None:
    llm.enqueue(
        Reply(
            tool_calls=[
                Call("say", {"text": "My name is Pip. Nice to meet you!"}),
                Call("perform", {"action": "jump"}),
            ]
        ),
        Reply(text=""),
    )
    async with SessionClient(url) as client:
        session = await client.start(director="llm", seed=4)
        question = np.concatenate(
            [noise(0.5, 0.002), speech("What is your name?", sampling_noise=False), noise(1.5, 0.002)]
        )
        await speak_into(client, question)
        heard = await client.wait_type("input.transcript", timeout=30)
        # The Director hears it when the client does: it can act only from then on.
        received = client.received
        heard_at = arrived(received, heard)
        assert "name" in heard["text"].lower()
        spoke = await client.wait_type("input.speech_started")
        stopped = await client.wait_type("input.speech_stopped")
        request = (await asyncio.wait_for(llm.wait_for_requests(1), 30))[0]
        assert "what is your name" in request["messages"][-1]["content"].lower()
        started = await client.wait_type("character.speech", state="started", timeout=30)
        assert started["text"] == "My name is Pip. Nice to meet you!"
        await client.wait_type("character.speech", state="ended", timeout=30)
        ended_at = client.received.video[-1].header["pts_ms"]
        await client.wait_frame(lambda f: f.header["pts_ms"] > ended_at + 1000)  # and a second more
        assert loud(client, 0.0) > 0.05  # the voice was sent with the frames
        # One Director run, once it had heard the question, made both plans, in the order it called them.
        plans = received.of_type("director.plan")
        assert [p["summary"] for p in plans] == ["say", "perform jump"]
        assert len({p["epoch"] for p in plans}) == 1
        assert all(arrived(received, p) > heard_at for p in plans)

    # The frames show it: the probes find jumps only after the answer, and a mouth that follows the voice.
    video = received.video
    before = [f for f in video if f.t < heard_at]
    after = [f for f in video if f.t >= heard_at]
    # Whisper transcribes an utterance once it has ended, so the frames checked for jumps before the
    # Director heard the question hold all those sent while it was spoken: the check is not empty as long
    # as the session sent chunks meanwhile (a second and more of speech; on a loaded machine the generator
    # runs behind real time, so how many it sent is the machine's business, not the Director's).
    spoke_at, stopped_at = arrived(received, spoke), arrived(received, stopped)
    assert spoke_at < stopped_at <= heard_at
    chunk_frames = session["chunk_frames"]
    spoken = [f for f in before if spoke_at <= f.t < stopped_at]
    assert len({f.header["chunk"] for f in spoken}) >= 2 and len(spoken) >= chunk_frames
    identity = 0  # the default character
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert not measure(client.received.pictures(before), identity).jumping.any()
        answer = measure(client.received.pictures(after), identity)
    assert answer.jumping.sum() >= 4
    voice = client.received.voice_loudness(after)
    talking = voice > 0
    assert talking.sum() >= 24  # at least a second of voice
    assert np.corrcoef(voice[talking], np.nan_to_num(answer.mouth[talking]))[0, 1] > 0.5


TALE = (
    "Once upon a time there was a fox who lived by a very long river, and every day it walked along the"
    " water looking for fish."
)


def voiced(client: SessionClient, frame: VideoFrame) -> bool:
    """Whether the character's audio sent with ``frame`` is not silent."""
    return bool(client.received.voice_loudness([frame])[0] > 0)


async def test_talking_over_the_character_cuts_its_speech_to_what_was_heard(
    url: str, llm: LLMServer, factory: SessionFactory
) -> None:
    # The voice is synthesised the same way every time: its first word lasts this long from the start.
    first_word_ms = 1000 * factory.voice.synthesize(TALE).words[0].end / OUTPUT_RATE
    llm.enqueue(Reply(tool_calls=[Call("say", {"text": TALE})]), Reply(text=""))
    async with SessionClient(url) as client:
        await client.start(director="llm", seed=6)
        await client.send({"type": "input.text", "text": "Tell me a long story."})
        started = await client.wait_type("character.speech", state="started", timeout=30)
        # Talk over it once its first word has been played, so that something was heard.
        started_at = arrived(client.received, started)
        voice = await client.wait_frame(lambda f: f.t >= started_at and voiced(client, f), timeout=10)
        end_ms = voice.header["pts_ms"] + first_word_ms
        await client.wait_frame(lambda f: f.header["pts_ms"] >= end_ms, timeout=10)
        await speak_into(
            client, np.concatenate([speech("Wait, stop!", sampling_noise=False), noise(0.6, 0.002)])
        )
        cut = await client.wait_type("character.speech", state="interrupted", timeout=10)
        # What was heard is the words played before the cut: a start of the text, not all of it.
        assert cut["heard_text"] and cut["text"].startswith(cut["heard_text"])
        assert len(cut["heard_text"]) < len(cut["text"])


async def test_an_intervention_becomes_a_new_branch_that_the_story_then_follows(
    url: str, llm: LLMServer
) -> None:
    storm = {
        "id": "storm",
        "description": "A storm blows the gate open.",
        "say": "Whoa, what a wind!",
        "emotion": "surprised",
        "choices": [
            {"id": "run_in", "label": "Run into the garden", "target": "door", "effects": ["has_key = true"]},
            {"id": "shelter", "label": "Shelter in the shed", "target": "shed"},
        ],
    }
    llm.enqueue(Reply(tool_calls=[Call("story_add_branch", storm)]), Reply(text=""))
    async with SessionClient(url) as client:
        await client.start(story="garden_gate", director="llm", seed=8)
        await client.wait_type("story.state", node="gate")
        await client.send(
            {"type": "story.intervene", "text": "A storm should blow the gate open", "ref": "i"}
        )
        await client.wait_type("input.accepted", ref="i")
        try:
            branch = await client.wait_type("story.state", node="storm", timeout=30)
        except TimeoutError:
            pytest.fail(
                f"no storm beat; {llm.pending} scripted answers unused; the endpoint was asked {llm.asked()}"
            )
        assert [c["id"] for c in branch["choices"]] == ["run_in", "shelter"]
        await client.wait_type("character.speech", state="started", text="Whoa, what a wind!", timeout=30)
        await client.send({"type": "story.choose", "choice": "run_in"})
        door = await client.wait_type("story.state", node="door", timeout=30)
        assert [n["beat"] for n in door["history"]] == ["gate", "storm", "door"]
