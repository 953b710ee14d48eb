"""An onstage avatar for LiveKit Agents (``onstage[livekit]``): a ``VideoGenerator`` backed by an onstage
session, for LiveKit's ``AvatarRunner`` to publish to a room.

    generator = await OnstageVideoGenerator.connect("ws://127.0.0.1:8765/v1/session")
    runner = AvatarRunner(room, audio_recv=receiver, video_gen=generator, options=avatar_options(generator))

``push_audio`` sends the agent's TTS audio to the session as the character's voice (a segment per
utterance, ended by ``AudioSegmentEnd``); iterating yields the character's frames as they are presented:
an ``rtc.VideoFrame`` per frame, preceded while it speaks by that frame's audio (an ``rtc.AudioFrame`` at
the session's ``audio_out_rate``, a whole number of samples a frame), and an ``AudioSegmentEnd`` after a
segment's last audio, which the runner reports as playback finished. Idle frames carry no audio.
``clear_buffer`` interrupts (``response.interrupt``): nothing of the cut speech is yielded after it and
it gets no ``AudioSegmentEnd``, so the runner's own report (interrupted, at the position it counted) is
the only one.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
from livekit import rtc
from livekit.agents.voice.avatar import AudioSegmentEnd, AvatarOptions, VideoGenerator

from integrations.character import DEFAULT_PLAN
from integrations.session import OnstageSession, SegmentEnd


class OnstageVideoGenerator(VideoGenerator):
    """The character of an onstage session as an avatar's video and audio (see the module's docstring)."""

    def __init__(self, session: OnstageSession) -> None:
        if session.started is None:
            raise ValueError("open the session first (or use OnstageVideoGenerator.connect)")
        self.session = session

    @classmethod
    async def connect(
        cls, url: str, *, token: str | None = None, start: dict[str, Any] | None = None
    ) -> OnstageVideoGenerator:
        """Open a session at ``url`` (by default without a Director and with idle variety only: the agent
        does the talking) and wrap it."""
        session = OnstageSession(
            url, token=token, start={"director": "none", "plan": DEFAULT_PLAN, **(start or {})}
        )
        await session.open()
        return cls(session)

    async def push_audio(self, frame: rtc.AudioFrame | AudioSegmentEnd) -> None:
        if isinstance(frame, AudioSegmentEnd):
            await self.session.voice_end()
            return
        if self.session.speaking is None:
            await self.session.voice_start()
        samples = np.frombuffer(frame.data, "<i2")[:: frame.num_channels]
        await self.session.voice_audio(samples.tobytes(), frame.sample_rate)

    async def clear_buffer(self) -> None:
        await self.session.interrupt()

    def __aiter__(self) -> AsyncIterator[rtc.VideoFrame | rtc.AudioFrame | AudioSegmentEnd]:
        return self._frames()

    async def aclose(self) -> None:
        await self.session.close()

    async def _frames(self) -> AsyncIterator[rtc.VideoFrame | rtc.AudioFrame | AudioSegmentEnd]:
        started = self.session.started
        assert started is not None
        rate = self.session.rate
        async for item in self.session.beats():
            if isinstance(item, SegmentEnd):
                yield AudioSegmentEnd()
                continue
            if item.segment is not None and item.audio:
                yield rtc.AudioFrame(item.audio, rate, 1, len(item.audio) // 2)
            rgb = await asyncio.to_thread(item.rgb)
            yield rtc.VideoFrame(started.width, started.height, rtc.VideoBufferType.RGB24, rgb.tobytes())


def avatar_options(generator: OnstageVideoGenerator) -> AvatarOptions:
    """The ``AvatarRunner``'s options for the session's picture, clock and audio."""
    started = generator.session.started
    assert started is not None
    return AvatarOptions(
        video_width=started.width,
        video_height=started.height,
        video_fps=started.fps,
        audio_sample_rate=started.audio_out_rate,
        audio_channels=1,
    )
