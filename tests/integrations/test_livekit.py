"""The onstage avatar's ``VideoGenerator`` contract (LiveKit Agents), tested directly against a real onstage
session on loopback (no LiveKit server can run here): audio pushed -> frames with the mouth following
it and a segment end; ``clear_buffer`` -> nothing stale, no segment end for the cut speech."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import numpy as np
import pytest
import pytest_asyncio

pytest.importorskip("livekit.agents")

from livekit import rtc
from livekit.agents.voice.avatar import AudioSegmentEnd

from integrations.livekit import OnstageVideoGenerator, avatar_options
from server.sessions import SessionFactory
from tests.support.voicing import STILL, loudness, mouths, speech_pcm, world_server

pytestmark = pytest.mark.asyncio(loop_scope="module")

RATE, OUT_RATE, FPS = 48_000, 24_000, 24
Item = rtc.VideoFrame | rtc.AudioFrame | AudioSegmentEnd


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def url(factory: SessionFactory) -> AsyncIterator[str]:
    async with world_server(factory) as (_, address):
        yield address


@contextlib.asynccontextmanager
async def avatar(url: str) -> AsyncIterator[tuple[OnstageVideoGenerator, list[Item]]]:
    """A generator on a fresh session, and what it yields (collected as it comes)."""
    generator = await OnstageVideoGenerator.connect(url, start={"seed": 5, "plan": STILL})
    items: list[Item] = []

    async def consume() -> None:
        async for item in generator:
            items.append(item)

    task = asyncio.create_task(consume())
    try:
        yield generator, items
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await generator.aclose()


async def push(generator: OnstageVideoGenerator, pcm: bytes, end: bool = True) -> None:
    """``pcm`` as a LiveKit TTS sends it: 10 ms frames at 48 kHz, then the segment's end."""
    step = 2 * RATE // 100
    for a in range(0, len(pcm), step):
        piece = pcm[a : a + step]
        await generator.push_audio(rtc.AudioFrame(piece, RATE, 1, len(piece) // 2))
    if end:
        await generator.push_audio(AudioSegmentEnd())


async def until(items: list[Item], predicate, timeout: float = 20.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate(items):  # noqa: ASYNC110 (the consumer task appends as frames come)
            await asyncio.sleep(0.02)


def pictures(frames: list[rtc.VideoFrame]) -> np.ndarray:
    return np.stack([np.frombuffer(f.data, np.uint8).reshape(f.height, f.width, 3) for f in frames])


async def test_pushed_audio_comes_back_with_frames_whose_mouth_follows_it_and_a_segment_end(url: str) -> None:
    async with avatar(url) as (generator, items):
        options = avatar_options(generator)
        assert (options.video_width, options.video_height, options.video_fps) == (128, 128, FPS)
        assert (options.audio_sample_rate, options.audio_channels) == (OUT_RATE, 1)
        await until(items, lambda got: len(got) >= FPS)  # video flows before any audio
        assert all(isinstance(i, rtc.VideoFrame) for i in items)
        pcm = speech_pcm(rate=RATE)
        await push(generator, pcm)
        await until(items, lambda got: any(isinstance(i, AudioSegmentEnd) for i in got))
        end = next(n for n, i in enumerate(items) if isinstance(i, AudioSegmentEnd))
        audio = [(n, i) for n, i in enumerate(items) if isinstance(i, rtc.AudioFrame)]
        assert audio and max(n for n, _ in audio) < end
        assert {(a.sample_rate, a.num_channels, a.samples_per_channel) for _, a in audio} == {
            (OUT_RATE, 1, 1000)
        }
        # Every audio frame goes with the picture after it; together they are the speech (but for frames the
        # server dropped on a loaded machine, which the session counts).
        assert all(isinstance(items[n + 1], rtc.VideoFrame) for n, _ in audio)
        frames = -(-len(pcm) // 2 // (RATE // FPS))
        assert frames - generator.session.missing <= len(audio) <= frames
        loud = np.array([loudness(bytes(a.data)) for _, a in audio])
        mouth = mouths(pictures([items[n + 1] for n, _ in audio]))  # type: ignore[misc]
        assert np.corrcoef(loud, mouth)[0, 1] > 0.5
        assert generator.session.endings[1][1] is False


async def test_clear_buffer_leaves_nothing_stale_and_no_segment_end_and_the_next_segment_plays(
    url: str,
) -> None:
    async with avatar(url) as (generator, items):
        pcm = speech_pcm(rate=RATE)
        await push(generator, pcm)
        await until(items, lambda got: sum(isinstance(i, rtc.AudioFrame) for i in got) >= FPS // 2)
        await generator.clear_buffer()
        cut = len(items)
        await until(items, lambda got: len(got) >= cut + FPS)
        after = items[cut:]
        assert not [i for i in after if isinstance(i, rtc.AudioFrame | AudioSegmentEnd)]
        assert not [i for i in items if isinstance(i, AudioSegmentEnd)]
        await until(items, lambda _: 1 in generator.session.endings)
        assert generator.session.endings[1][1] is True  # the server cut it too
        # The next utterance plays whole and ends with its own segment end.
        short = speech_pcm("See you soon.", rate=RATE)
        await push(generator, short)
        await until(items, lambda got: any(isinstance(i, AudioSegmentEnd) for i in got))
        replies = [i for i in items[cut:] if isinstance(i, rtc.AudioFrame)]
        frames = -(-len(short) // 2 // (RATE // FPS))
        assert frames - generator.session.missing <= len(replies) <= frames
