"""The onstage avatar under LiveKit's own ``AvatarRunner``: the playback reports an agent gets through its
audio output (``QueueAudioOutput``, LiveKit's in-process receiver) as a real onstage session plays the
audio: started and finished once per reply, ``interrupted`` with the position played on ``clear_buffer``,
and nothing of a cut reply reported or played after it.

No LiveKit server can run here, so the runner's room is a stand-in that is connected and takes its two
tracks at once; the tracks, the audio and video sources and the A/V synchroniser that paces the frames
are LiveKit's own."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import pytest_asyncio

pytest.importorskip("livekit.agents")

from livekit import rtc
from livekit.agents.voice.avatar import AudioSegmentEnd, AvatarRunner, QueueAudioOutput
from livekit.agents.voice.io import PlaybackFinishedEvent

from integrations.livekit import OnstageVideoGenerator, avatar_options
from server.sessions import SessionFactory
from tests.support.voicing import STILL, speech_pcm, world_server

pytestmark = pytest.mark.asyncio(loop_scope="module")

RATE, FPS = 48_000, 24
"""What the agent's TTS hands its audio output at (LiveKit's usual); the session's frame rate."""


class _Publication:
    async def wait_for_subscription(self) -> None:
        return None


class _Participant:
    def __init__(self) -> None:
        self.tracks: list[rtc.LocalAudioTrack | rtc.LocalVideoTrack] = []

    async def publish_track(self, track: Any, options: rtc.TrackPublishOptions) -> _Publication:
        self.tracks.append(track)
        return _Publication()


class LoopbackRoom(rtc.EventEmitter[str]):
    """Where the runner publishes: always connected, taking any track (no LiveKit server runs here)."""

    def __init__(self) -> None:
        super().__init__()
        self.local_participant = _Participant()

    def isconnected(self) -> bool:
        return True


class Counted(OnstageVideoGenerator):
    """The onstage avatar, counting what it yields to the runner (a probe on the real generator)."""

    def __init__(self, generator: OnstageVideoGenerator) -> None:
        super().__init__(generator.session)
        self.audio = 0  # audio frames yielded
        self.video = 0
        self.moved = asyncio.Event()

    def __aiter__(self) -> AsyncIterator[rtc.VideoFrame | rtc.AudioFrame | AudioSegmentEnd]:
        return self._counted()

    async def _counted(self) -> AsyncIterator[rtc.VideoFrame | rtc.AudioFrame | AudioSegmentEnd]:
        async for item in super().__aiter__():
            yield item
            self.audio += isinstance(item, rtc.AudioFrame)
            self.video += isinstance(item, rtc.VideoFrame)
            self.moved.set()

    async def until(self, predicate: Callable[[], bool], timeout: float = 30.0) -> None:
        async with asyncio.timeout(timeout):
            while not predicate():
                self.moved.clear()
                await self.moved.wait()


@dataclass
class Reports:
    """What the agent's audio output was told, in order, as it was told."""

    avatar: Counted
    events: list[tuple[str, float, bool, int]] = field(default_factory=list)
    """(kind, position, interrupted, audio frames the avatar had yielded by then)"""
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def started(self, _: Any) -> None:
        self.events.append(("started", 0.0, False, self.avatar.audio))
        self.changed.set()

    def finished(self, ev: PlaybackFinishedEvent) -> None:
        self.events.append(("finished", ev.playback_position, ev.interrupted, self.avatar.audio))
        self.changed.set()

    async def until(self, n: int, timeout: float = 30.0) -> None:
        """Wait for ``n`` reports."""
        async with asyncio.timeout(timeout):
            while len(self.events) < n:
                self.changed.clear()
                await self.changed.wait()


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def url(factory: SessionFactory) -> AsyncIterator[str]:
    async with world_server(factory) as (_, address):
        yield address


@contextlib.asynccontextmanager
async def running(url: str) -> AsyncIterator[tuple[QueueAudioOutput, Counted, Reports]]:
    """An agent's audio output, the onstage avatar on a fresh session, and LiveKit's runner between them."""
    generator = Counted(await OnstageVideoGenerator.connect(url, start={"seed": 5, "plan": STILL}))
    audio_out = QueueAudioOutput(wait_playback_start=True)
    reports = Reports(generator)
    audio_out.on("playback_started", reports.started)
    audio_out.on("playback_finished", reports.finished)
    room = LoopbackRoom()
    runner = AvatarRunner(room, audio_recv=audio_out, video_gen=generator, options=avatar_options(generator))  # type: ignore[arg-type]
    await runner.start()
    try:
        yield audio_out, generator, reports
    finally:
        await runner.aclose()
        await generator.aclose()


async def say(audio_out: QueueAudioOutput, pcm: bytes) -> float:
    """One reply as the agent's TTS forwarding captures it (10 ms frames), flushed; its length in s."""
    step = 2 * RATE // 100
    for a in range(0, len(pcm), step):
        piece = pcm[a : a + step]
        await audio_out.capture_frame(rtc.AudioFrame(piece, RATE, 1, len(piece) // 2))
    audio_out.flush()
    return len(pcm) / 2 / RATE


async def test_a_reply_is_reported_started_then_finished_at_its_length(url: str) -> None:
    async with running(url) as (audio_out, avatar, reports):
        length = await say(audio_out, speech_pcm(rate=RATE))
        await reports.until(2)
        done = await asyncio.wait_for(audio_out.wait_for_playout(), 30)
    frame_s = 1 / avatar.session.rate * (avatar.session.rate // FPS)
    (started, *_), (kind, position, interrupted, played), *rest = reports.events
    assert (started, kind, interrupted, rest) == ("started", "finished", False, [])
    # Played to its end: every audio frame the avatar yielded, its length in whole frames (less any
    # frame the server dropped).
    assert position == pytest.approx(played * frame_s)
    assert length - avatar.session.missing * frame_s <= position <= length + frame_s
    assert (done.playback_position, done.interrupted) == (position, False)


async def test_clear_buffer_is_reported_interrupted_at_what_played_and_the_next_reply_plays_whole(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    async with running(url) as (audio_out, avatar, reports):
        frame_s = 1 / avatar.session.rate * (avatar.session.rate // FPS)
        length = await say(audio_out, speech_pcm(rate=RATE))
        await avatar.until(lambda: avatar.audio >= FPS // 2)  # half a second of it went out
        audio_out.clear_buffer()
        await reports.until(2)
        (started, *_), (kind, cut_at, interrupted, played) = reports.events
        assert (started, kind, interrupted) == ("started", "finished", True)
        # At the position of the audio the avatar had yielded: what LiveKit played of the reply.
        assert cut_at == pytest.approx(played * frame_s)
        assert FPS // 2 * frame_s <= cut_at < length
        await asyncio.wait_for(audio_out.wait_for_playout(), 10)
        # Nothing of the cut reply comes after: a second of pictures without a sound.
        video = avatar.video
        await avatar.until(lambda: avatar.video >= video + FPS)
        assert avatar.audio == played
        # The next reply: reported on its own, from its own start, to its own length.
        short = await say(audio_out, speech_pcm("See you soon.", rate=RATE))
        await reports.until(4)
    assert [k for k, *_ in reports.events] == ["started", "finished", "started", "finished"]
    _, position, interrupted, total = reports.events[3]
    assert not interrupted
    assert position == pytest.approx((total - played) * frame_s)
    assert short - avatar.session.missing * frame_s <= position <= short + frame_s
    assert not [r for r in caplog.records if "more times than playback segments" in r.getMessage()]
