"""The character's voice from the client (binary kind 0x04 between ``voice.start`` and ``voice.end``): it
comes back in the audio-out slices sample for sample, the mouth follows it, an interrupt cuts it at the
next frame, and the user's speaking state from the client becomes the same speech events as the VAD's."""

from __future__ import annotations

from collections.abc import AsyncIterator

import numpy as np
import pytest
import pytest_asyncio

from server.client import SessionClient
from server.sessions import SessionFactory
from tests.support.voicing import STILL, loudness, mouths, speech_pcm, world_server

pytestmark = pytest.mark.asyncio(loop_scope="module")

RATE, FPS, PER_FRAME = 24_000, 24, 1000


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def url(factory: SessionFactory) -> AsyncIterator[str]:
    async with world_server(factory) as (_, address):
        yield address


async def started(client: SessionClient) -> None:
    await client.start(seed=1, director="none", plan=STILL)
    await client.wait_frame(lambda f: f.header["frame"] == 0 and f.header["chunk"] >= 1)


async def send_voice(client: SessionClient, pcm: bytes, frame_samples: int = RATE) -> str:
    """One voice segment of ``pcm`` in frames of ``frame_samples``; returns its segment id."""
    since = len(client.received.messages)
    await client.send({"type": "voice.start", "ref": "v"})
    accepted = await client.wait_for(lambda m: m.get("ref") == "v", since=since)
    assert accepted["type"] == "input.accepted" and accepted["kind"] == "voice"
    assert client.ws is not None
    for a in range(0, len(pcm), 2 * frame_samples):
        await client.ws.send(b"\x04" + pcm[a : a + 2 * frame_samples])
    await client.send({"type": "voice.end"})
    return accepted["event_id"]


def slices(client: SessionClient, start_ms: float, end_ms: float) -> bytes:
    return b"".join(a.pcm for a in client.received.audio if start_ms <= a.header["pts_ms"] < end_ms)


async def test_the_clients_voice_comes_back_sample_for_sample_and_the_mouth_follows_it(url: str) -> None:
    pcm = speech_pcm()
    async with SessionClient(url) as client:
        await started(client)
        segment = await send_voice(client, pcm)
        begun = await client.wait_type("voice.started", segment=segment)
        ended = await client.wait_type("voice.ended", timeout=20, segment=segment)
        assert ended["interrupted"] is False
        # The segment's frames are those from its start on, as many as its audio fills.
        frames = -(-len(pcm) // (2 * PER_FRAME))
        assert ended["pts_ms"] == pytest.approx(begun["pts_ms"] + frames * 1000 / FPS, abs=1e-3)
        last = await client.wait_frame(lambda f: f.header["pts_ms"] >= ended["pts_ms"] + 500)
        played = slices(client, begun["pts_ms"], ended["pts_ms"])
        assert played == pcm + bytes(len(played) - len(pcm))  # its samples, then silence to the frame's end
        assert not any(slices(client, 0, begun["pts_ms"]))
        assert not any(slices(client, ended["pts_ms"], last.header["pts_ms"]))
        # The pictures of the voice's frames show a mouth that follows its loudness.
        voiced = [f for f in client.received.video if begun["pts_ms"] <= f.header["pts_ms"] < ended["pts_ms"]]
        voice = client.received.voice_loudness(voiced)
        mouth = mouths(client.received.pictures(voiced))
        assert (voice > 0).sum() >= FPS
        assert np.corrcoef(voice, mouth)[0, 1] > 0.5
        before = [f for f in client.received.video if f.header["pts_ms"] < begun["pts_ms"]]
        assert mouths(client.received.pictures(before)).max() < mouth.max() / 2


async def test_an_interrupt_cuts_the_clients_voice_at_the_next_frame_and_its_late_audio_is_dropped(
    url: str,
) -> None:
    pcm = speech_pcm()
    async with SessionClient(url) as client:
        await started(client)
        assert client.ws is not None
        await client.send({"type": "voice.start"})
        await client.ws.send(b"\x04" + pcm[: 2 * RATE])  # a second of it; the rest comes after the cut
        begun = await client.wait_type("voice.started")
        await client.wait_frame(lambda f: f.header["pts_ms"] >= begun["pts_ms"] + 400)
        seen = client.received.video[-1].header["pts_ms"]
        await client.send({"type": "response.interrupt"})
        ended = await client.wait_type("voice.ended", segment=begun["segment"])
        assert ended["interrupted"] is True
        # It reached the server within a chunk of the last frame the client had when it sent it.
        assert seen < ended["pts_ms"] <= seen + (4 + 1) * 1000 / FPS
        since = len(client.received.messages)
        await client.ws.send(b"\x04" + pcm[2 * RATE : 4 * RATE])  # in flight when the cut came: dropped
        await client.send({"type": "voice.end"})
        await client.send({"type": "ping", "ref": "p"})
        await client.wait_for(lambda m: m.get("ref") == "p", since=since)
        assert not [m for _, m in client.received.messages[since:] if m["type"] == "error"]
        cut = await client.wait_frame(lambda f: f.header["pts_ms"] >= ended["pts_ms"] + 1000)
        assert (
            slices(client, begun["pts_ms"], ended["pts_ms"])
            == pcm[: len(slices(client, begun["pts_ms"], ended["pts_ms"]))]
        )
        assert not any(slices(client, ended["pts_ms"], cut.header["pts_ms"]))
        # The mouth closes: the chunk being shown at the cut was generated before it, the next ones are not.
        chunk_ms = 4 * 1000 / FPS
        after = [f for f in client.received.video if ended["pts_ms"] + 2 * chunk_ms <= f.header["pts_ms"]]
        voiced = [f for f in client.received.video if begun["pts_ms"] <= f.header["pts_ms"] < ended["pts_ms"]]
        assert (
            mouths(client.received.pictures(after)).max() < mouths(client.received.pictures(voiced)).max() / 2
        )


async def test_the_users_speaking_state_from_the_client_becomes_the_speech_events_of_the_session(
    url: str,
) -> None:
    async with SessionClient(url) as client:
        await started(client)
        await client.send({"type": "input.speech", "state": "started", "ref": "s"})
        accepted = await client.wait_for(lambda m: m.get("ref") == "s")
        assert accepted["type"] == "input.accepted" and accepted["kind"] == "speech"
        heard = await client.wait_type("input.speech_started", event_id=accepted["event_id"])
        assert heard["audio_ms"] > 0  # the media clock's time: frames were playing
        # The listening reflex answers it: a frame reflects the event.
        await client.wait_frame(lambda f: accepted["event_id"] in f.header["reflects"])
        await client.send({"type": "input.speech", "state": "stopped", "ref": "t"})
        stopped = await client.wait_for(lambda m: m.get("ref") == "t")
        heard_stop = await client.wait_type("input.speech_stopped", event_id=stopped["event_id"])
        assert heard_stop["audio_ms"] >= heard["audio_ms"]


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        (b"\x04" + b"\x00" * 3, "bad_field"),  # an odd byte count
        (b"\x04", "bad_field"),  # no samples
        (b"\x04" + b"\x00" * (2 * RATE + 2), "too_large"),  # more than a second
        (b"\x05\x00\x00", "bad_field"),  # no such kind
    ],
)
async def test_bad_voice_frames_are_answered_with_an_error_and_the_session_goes_on(
    url: str, frame: bytes, code: str
) -> None:
    async with SessionClient(url) as client:
        await started(client)
        assert client.ws is not None
        await client.send({"type": "voice.start"})
        await client.ws.send(frame)
        error = await client.wait_type("error")
        assert error["code"] == code and error["fatal"] is False
        assert "/" not in error["message"] and "Traceback" not in error["message"]
        await client.ws.send(b"\x04" + speech_pcm()[:4000])
        await client.send({"type": "voice.end"})
        assert (await client.wait_type("voice.ended"))["interrupted"] is False


async def test_voice_audio_outside_a_segment_is_refused(url: str) -> None:
    async with SessionClient(url) as client:
        await started(client)
        assert client.ws is not None
        await client.ws.send(b"\x04" + speech_pcm()[:4000])
        error = await client.wait_type("error")
        assert error["code"] == "bad_field" and "voice.start" in error["message"]
        assert not loudness(slices(client, 0, 1e9))
