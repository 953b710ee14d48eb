"""The onstage video service in a real Pipecat pipeline (Pipecat's ``run_test``) against a real onstage
server on loopback (the ``world`` backend, whose mouth the probes read), fed real Piper TTS audio at
Piper's own rate (22.05 kHz, as a Pipecat TTS service would send it)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import TypeVar

import numpy as np
import pytest
import pytest_asyncio

pytest.importorskip("pipecat")

from pipecat.frames.frames import (
    Frame,
    InterruptionFrame,
    OutputImageRawFrame,
    TTSAudioRawFrame,
    TTSStartedFrame,
    TTSStoppedFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.tests.utils import SleepFrame, run_test
from scipy.signal import resample_poly

from integrations.pipecat import CharacterFrame, OnstageVideoService
from server.sessions import SessionFactory
from streaming_model.probes import measure
from tests.support.voicing import STILL, loudness, mouths, speech_pcm, world_server

pytestmark = pytest.mark.asyncio(loop_scope="module")

F = TypeVar("F", bound=Frame)

TTS_RATE, OUT_RATE, FPS, CHUNK_FRAMES = 22_050, 24_000, 24, 4
FRAME_MS = 1000 / FPS
TTS_CHUNK = 2205  # Pipecat TTS services push audio in pieces of tens of milliseconds


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def url(factory: SessionFactory) -> AsyncIterator[str]:
    async with world_server(factory) as (_, address):
        yield address


class Recorder(FrameProcessor):
    """The pipeline's next stage: every frame that comes downstream, with the time it came."""

    def __init__(self) -> None:
        super().__init__()
        self.frames: list[tuple[float, Frame]] = []

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if direction is FrameDirection.DOWNSTREAM:
            self.frames.append((time.monotonic(), frame))
        await self.push_frame(frame, direction)

    def of(self, kind: type[F], frames: list[tuple[float, Frame]] | None = None) -> list[tuple[float, F]]:
        """The frames (all, or those given) of ``kind``, with their times."""
        return [(t, f) for t, f in (self.frames if frames is None else frames) if isinstance(f, kind)]

    def index(self, kind: type) -> int:
        return next(i for i, (_, f) in enumerate(self.frames) if isinstance(f, kind))


def tts(pcm: bytes) -> list[Frame]:
    """A TTS service's output for ``pcm``: started, the audio in pieces, stopped."""
    step = 2 * TTS_CHUNK
    audio = [TTSAudioRawFrame(pcm[a : a + step], TTS_RATE, 1) for a in range(0, len(pcm), step)]
    return [TTSStartedFrame(), *audio, TTSStoppedFrame()]


def pictures(images: list[OutputImageRawFrame]) -> np.ndarray:
    return np.stack([np.frombuffer(f.image, np.uint8).reshape(f.size[1], f.size[0], 3) for f in images])


def pts(frame: Frame) -> float:
    return frame.metadata["onstage"]["pts_ms"]


async def run(url: str, frames: list[Frame]) -> tuple[OnstageVideoService, Recorder]:
    service = OnstageVideoService(url, start={"seed": 3, "plan": STILL})
    recorder = Recorder()
    await run_test(Pipeline([service, recorder]), frames_to_send=frames, start_timeout=30.0)
    return service, recorder


async def test_frames_come_in_order_at_rate_with_the_voice_in_step_and_the_mouth_follows_it(url: str) -> None:
    pcm = speech_pcm(rate=TTS_RATE)
    speaking_s = len(pcm) / 2 / TTS_RATE
    service, out = await run(url, [SleepFrame(1.0), *tts(pcm), SleepFrame(speaking_s + 1.5)])
    images = out.of(OutputImageRawFrame)
    # In order, on the session's clock (but for frames the server dropped on a loaded machine, which the
    # session counts), at the rate they are presented.
    assert service.session is not None
    missing = service.session.missing
    stamps = [pts(f) for _, f in images]
    assert stamps == sorted(set(stamps))
    assert round((stamps[-1] - stamps[0]) / FRAME_MS) + 1 == len(stamps) + missing
    assert all(f.sync_with_audio and f.size == (128, 128) for _, f in images)
    arrival = np.array([t for t, _ in images]) - images[0][0]
    lag = arrival - (np.array(stamps) - stamps[0]) / 1000
    assert np.ptp(lag) < 0.5  # neither in bursts ahead of their time nor falling behind it
    # The video did not wait for the TTS: frames came before its first audio was even sent.
    first_audio = out.index(TTSAudioRawFrame)
    assert sum(isinstance(f, OutputImageRawFrame) for _, f in out.frames[:first_audio]) >= FPS // 4
    # The voice: the TTS audio at the session's rate, one whole frame of samples before each picture.
    audio = out.of(TTSAudioRawFrame)
    assert {(f.sample_rate, f.num_frames) for _, f in audio} == {(OUT_RATE, OUT_RATE // FPS)}
    for i, (_, frame) in enumerate(out.frames):
        if isinstance(frame, TTSAudioRawFrame):
            assert isinstance(out.frames[i + 1][1], OutputImageRawFrame)
    voice = np.frombuffer(b"".join(f.audio for _, f in audio), "<i2").astype(np.float64)
    expected = resample_poly(np.frombuffer(pcm, "<i2").astype(np.float64), 160, 147)
    if not missing:
        assert abs(voice.size - expected.size) <= OUT_RATE // FPS
        n = min(voice.size, expected.size)
        assert np.corrcoef(voice[:n], expected[:n])[0, 1] > 0.95
    # Idle frames carry no audio: every audio frame is the voice's, and it stops where the voice does.
    frames = -(-expected.size // (OUT_RATE // FPS))
    assert frames - missing <= len(audio) <= frames
    stop = out.index(TTSStoppedFrame)
    assert stop > max(i for i, (_, f) in enumerate(out.frames) if isinstance(f, TTSAudioRawFrame))
    assert sum(isinstance(f, OutputImageRawFrame) for _, f in out.frames[stop:]) >= FPS // 2
    # The mouth in the pictures follows the voice sent with them.
    following = [out.frames[i + 1] for i, (_, f) in enumerate(out.frames) if isinstance(f, TTSAudioRawFrame)]
    voiced = [f for _, f in out.of(OutputImageRawFrame, following)]
    loud = np.array([loudness(f.audio) for _, f in audio])
    mouth = mouths(pictures(voiced))
    assert np.corrcoef(loud, mouth)[0, 1] > 0.5
    idle = [f for _, f in images[: FPS // 4]]
    assert mouths(pictures(idle)).max() < mouth.max() / 2
    assert not service.session.errors


async def test_nothing_stale_comes_downstream_after_an_interruption_and_the_server_hears_it_within_a_chunk(
    url: str,
) -> None:
    pcm = speech_pcm(rate=TTS_RATE)
    service, out = await run(
        url, [SleepFrame(0.3), *tts(pcm), SleepFrame(1.2), InterruptionFrame(), SleepFrame(1.0)]
    )
    cut = out.index(InterruptionFrame)
    before, after = out.frames[:cut], out.frames[cut:]
    assert any(isinstance(f, TTSAudioRawFrame) for _, f in before)  # it was speaking
    assert not [f for _, f in after if isinstance(f, TTSAudioRawFrame | TTSStoppedFrame)]
    # The video goes on, in order.
    images = [f for _, f in out.of(OutputImageRawFrame, after)]
    assert len(images) >= FPS // 2
    assert [pts(f) for f in images] == sorted(pts(f) for f in images)
    # The server cut the voice within a chunk of the last frame out before the interruption.
    assert service.session is not None
    ((end_ms, interrupted),) = service.session.endings.values()
    assert interrupted
    shown = max(pts(f) for _, f in out.of(OutputImageRawFrame, before))
    assert shown < end_ms <= shown + (CHUNK_FRAMES + 1) * FRAME_MS
    # And the mouth closes: the chunk on screen at the cut was generated before it, later ones are not.
    late = [f for f in images if pts(f) >= end_ms + 2 * CHUNK_FRAMES * FRAME_MS]
    spoken = [f for _, f in out.of(OutputImageRawFrame, before)][-FPS:]
    assert mouths(pictures(late)).max() < mouths(pictures(spoken)).max() / 2


async def test_a_character_frame_and_the_llm_tools_drive_the_character(url: str) -> None:
    service = OnstageVideoService(url, start={"seed": 3, "plan": STILL})
    out = Recorder()
    await run_test(
        Pipeline([service, out]),
        frames_to_send=[
            SleepFrame(0.5),
            CharacterFrame(behavior={"kind": "action", "name": "jump"}),
            SleepFrame(2.0),
        ],
        start_timeout=30.0,
    )
    images = [f for _, f in out.of(OutputImageRawFrame)]
    assert measure(pictures(images), 0).jumping.any()
    assert not measure(pictures(images[:6]), 0).jumping.any()
    # The tools come from the session's own vocabulary.
    assert service.session is not None and service.session.started is not None
    caps = service.session.started.capabilities
    tools = {t.name: t for t in service.tools()}
    assert set(tools) == {"set_emotion", "do_action", "look_at"}
    assert tools["set_emotion"].properties["emotion"]["enum"] == list(caps.emotions)
    assert tools["do_action"].properties["action"]["enum"] == list(caps.actions)
