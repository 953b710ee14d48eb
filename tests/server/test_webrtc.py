"""The WebRTC transport, aiortc against aiortc in one process: a real server on loopback (the ``world``
backend at 16 fps), signalling over ``GET /v1/rtc``, the character's video and voice as tracks, the
microphone as a track, the protocol's messages on a data channel.

ICE is held to 127.0.0.1 (``RtcSettings.ice_addresses``; aioice's lookup is process-wide, so the client
here offers the same): no packet leaves loopback, which the first test checks in both descriptions.
"""

from __future__ import annotations

import asyncio
import re
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator

import numpy as np
import pytest
import pytest_asyncio

from server import demo_audio
from server.app import OnstageServer
from server.client import SessionClient
from server.limits import Limits
from server.sessions import SessionFactory
from server.webrtc.client import RtcSessionClient
from server.webrtc.endpoint import encode_offer
from server.webrtc.settings import RtcSettings
from server.webrtc.tracks import VIDEO_CLOCK_RATE
from streaming_model.backends import open_backend

pytestmark = pytest.mark.asyncio(loop_scope="module")

FPS = 16
LOOPBACK_ONLY = RtcSettings(ice_addresses=("127.0.0.1",))


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def server(factory: SessionFactory) -> AsyncIterator[OnstageServer]:
    backend = open_backend("world", {"fps": str(FPS)})
    sessions = SessionFactory(backend, factory.voice, factory.hearing)
    # Sessions of earlier tests wait out their grace paused (no slot, no work); the resume test needs one.
    srv = OnstageServer(
        sessions, Limits(admission="ceiling", max_sessions=2, resume_grace_s=5.0), rtc=LOOPBACK_ONLY
    )
    await srv.start("127.0.0.1", 0)
    yield srv
    await srv.close()


@pytest.fixture
def base(server: OnstageServer) -> str:
    return f"http://127.0.0.1:{server.port}"


def candidates(sdp: str) -> set[str]:
    """The addresses of the ICE candidates in an SDP description."""
    return {line.split()[4] for line in sdp.splitlines() if line.startswith("a=candidate:")}


def rms(samples: list[np.ndarray]) -> float:
    return float(np.sqrt(np.mean(np.concatenate(samples) ** 2))) if samples else 0.0


def voice_between(client: RtcSessionClient, start: float, end: float) -> list[np.ndarray]:
    return [s for t, s in client.received.voice if start <= t < end]


async def until(predicate, timeout: float = 20.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():  # noqa: ASYNC110 (media arrives in the client's own tasks)
            await asyncio.sleep(0.02)


async def test_offer_and_answer_hold_only_loopback_candidates_and_the_session_starts_on_the_channel(
    base: str,
) -> None:
    async with RtcSessionClient(base) as client:
        offer, answer = client.pc.localDescription.sdp, client.pc.remoteDescription.sdp
        assert candidates(offer) == candidates(answer) == {"127.0.0.1"}
        assert {m for m in re.findall(r"^m=(\w+)", answer, re.M)} == {"video", "audio", "application"}
        started = await client.start(seed=1)
        assert (started["fps"], started["protocol"]) == (FPS, 1)


async def test_video_frames_arrive_with_pts_at_the_backends_rate_and_chunk_headers(base: str) -> None:
    async with RtcSessionClient(base) as client:
        started = await client.start(seed=2)
        await client.wait_frame(lambda f: f.header["chunk"] >= 6, timeout=30)
        video = client.received.video
        steps = np.diff([f.header["pts_ms"] for f in video]) * VIDEO_CLOCK_RATE / 1000.0
        # 90 kHz ticks between frames: 5625 at 16 fps (aiortc's own clock would give 3000, its 30 fps).
        assert steps.size >= 20 and set(np.round(steps).astype(int)) == {VIDEO_CLOCK_RATE // FPS}
        chunk_frames = started["chunk_frames"]
        assert [f.header["frame"] for f in video[:chunk_frames]] == list(range(chunk_frames))
        chunks = client.received.of_type("video.chunk")
        assert [c["pts_ms"] for c in chunks[1:4]] == [
            c["chunk"] * chunk_frames * 1000.0 / FPS for c in chunks[1:4]
        ]
        pictures = client.received.pictures()
        assert pictures.shape[1:] == (started["height"], started["width"], 3)
        assert pictures[-1].std() > 10.0, "the picture is one flat colour"


async def test_the_voice_arrives_on_the_audio_track_and_an_interrupt_silences_it(base: str) -> None:
    text = " ".join(["This is a long story about a fox who walks through the forest every morning."] * 4)
    plan = {"name": "talk", "timeline": [{"at_s": 0.3, "behaviors": [{"kind": "speech", "text": text}]}]}
    async with RtcSessionClient(base) as client:
        await client.start(seed=3, plan=plan, director="script")
        await client.wait_type("character.speech", timeout=20, state="started")
        await until(lambda: rms(voice_between(client, time.monotonic() - 0.3, time.monotonic())) > 0.02)
        # A second and more of the voice played before the cut: its first words were heard whole.
        sounding = time.monotonic()
        await until(lambda: bool(voice_between(client, sounding + 1.2, float("inf"))))
        await client.send({"type": "response.interrupt", "ref": "stop"})
        accepted = await client.wait_type("input.accepted", ref="stop")
        assert accepted["kind"] == "interrupt"
        interrupted = await client.wait_type("character.speech", state="interrupted")
        assert interrupted["heard_text"] and len(interrupted["heard_text"]) < len(text)
        told = next(t for t, m in client.received.messages if m is interrupted)
        # Speech would go on for many seconds; from a chunk and a margin after the interrupt, silence
        # (the track keeps sending it: audio still arrives).
        await until(lambda: bool(voice_between(client, told + 2.5, told + 3.0)), timeout=10)
        after = voice_between(client, told + 1.0, told + 3.0)
        assert len(after) >= 50 and rms(after) < 0.002, rms(after)


async def test_speech_in_the_microphone_track_is_heard(base: str) -> None:
    speech = np.clip(demo_audio.speech("Hello there, can you hear me?", sampling_noise=False), -1, 1) * 32767
    async with RtcSessionClient(base) as client:
        await client.start(seed=4, director="none")
        _, at_ms = await client.mic.play(speech.astype("<i2"))
        heard = await client.wait_type("input.speech_started", timeout=10)
        # Its position in the audio the server got: where the speech was played, give or take the
        # detector's window and the resampler's delay.
        assert at_ms - 100 <= heard["audio_ms"] <= at_ms + 600, (heard, at_ms)
        await client.wait_type("input.speech_stopped", timeout=10)


async def test_a_gesture_on_the_data_channel_is_accepted_and_a_received_frame_reflects_it(base: str) -> None:
    async with RtcSessionClient(base) as client:
        await client.start(seed=5, director="none")
        await client.wait_frame(lambda f: f.header["chunk"] >= 2, timeout=30)
        await client.send({"type": "input.gesture", "gesture": "wave", "ref": "g"})
        accepted = await client.wait_type("input.accepted", ref="g")
        assert accepted["kind"] == "gesture"
        frame = await client.wait_frame(lambda f: accepted["event_id"] in f.header["reflects"], timeout=10)
        assert frame.header["frame"] == 0 and frame.t > next(
            t for t, m in client.received.messages if m is accepted
        )


async def test_a_spliced_reaction_is_told_on_the_data_channel_for_the_frame_it_shows_from(base: str) -> None:
    async with RtcSessionClient(base) as client:
        started = await client.start(seed=5, director="none", splice=True)
        assert started.get("splices") is True
        await client.wait_frame(lambda f: f.header["chunk"] >= 2, timeout=30)
        for i in range(8):  # each as a chunk begins, until one shows mid-chunk (the machine's speed decides)
            chunk = client.received.video[-1].header["chunk"] + 2
            await client.wait_frame(lambda f, c=chunk: f.header["chunk"] >= c, timeout=10)
            await client.send({"type": "input.gesture", "gesture": "wave", "ref": f"s{i}"})
            accepted = await client.wait_type("input.accepted", ref=f"s{i}")
            frame = await client.wait_frame(
                lambda f, e=accepted["event_id"]: e in f.header["reflects"], timeout=10
            )
            if frame.header["frame"] > 0:
                break
        splices = client.received.of_type("video.splice")
    if splices:  # a frame's header says what its video.splice said
        (told,) = [m for m in splices if accepted["event_id"] in m["reflects"]]
        assert (told["chunk"], told["frame"]) == (frame.header["chunk"], frame.header["frame"])
        assert told["frame"] > 0
    else:
        assert frame.header["frame"] == 0


async def test_every_protocol_rule_holds_on_the_data_channel(base: str) -> None:
    async with RtcSessionClient(base) as client:
        await client.send({"type": "ping", "ref": "early"})
        early = await client.wait_type("error", ref="early")
        assert early["code"] == "not_started"
        assert client.channel is not None
        client.channel.send("{not json")
        assert (await client.wait_type("error", code="bad_json"))["fatal"] is False
        await client.start(seed=6)
        await client.send({"type": "no.such", "ref": "u"})
        assert (await client.wait_type("error", ref="u"))["code"] == "unknown_type"
        await client.send({"type": "ping", "ref": "p"})
        await client.wait_type("pong", ref="p")


async def test_a_session_started_over_webrtc_resumes_over_the_websocket(base: str) -> None:
    async with RtcSessionClient(base) as rtc:
        started = await rtc.start(seed=7)
        await rtc.wait_frame(lambda f: f.header["chunk"] >= 3, timeout=30)
    resume = {"session_id": started["session_id"], "resume_token": started["resume_token"]}
    async with SessionClient(base.replace("http://", "ws://") + "/v1/session") as ws:
        again = await ws.start(resume=resume)
        assert again["session_id"] == started["session_id"]
        frame = await ws.wait_frame(lambda f: True, timeout=20)
        assert frame.header["chunk"] >= 3  # the same session's media clock, going on


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("", "send one ?offer="),
        ("?offer=***", "not base64url"),
        (f"?offer={encode_offer('hello')[:-2]}xx", "not raw DEFLATE"),
        (f"?offer={encode_offer('hello')}", "not an SDP description"),
        ("?offer=" + encode_offer("v=0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\n"), "no video or application"),
    ],
)
async def test_a_bad_offer_is_refused_with_what_was_wrong(base: str, query: str, says: str) -> None:
    status, body = await asyncio.to_thread(get, f"{base}/v1/rtc{query}")
    assert status == 400 and says in body, (status, body)
    assert "Traceback" not in body and "aiortc" not in body


async def test_signalling_needs_the_websockets_token(factory: SessionFactory) -> None:
    srv = OnstageServer(factory, Limits(max_sessions=1), token_secret="s3cret", rtc=LOOPBACK_ONLY)
    await srv.start("127.0.0.1", 0)
    try:
        status, body = await asyncio.to_thread(get, f"http://127.0.0.1:{srv.port}/v1/rtc?offer=x")
        assert status == 401 and "token" in body
    finally:
        await srv.close()
