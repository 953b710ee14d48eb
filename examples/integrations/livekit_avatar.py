"""The onstage avatar's ``VideoGenerator`` for LiveKit Agents, driven as LiveKit's ``AvatarRunner`` drives
it: run ``onstage serve`` first, then
``python examples/integrations/livekit_avatar.py [ws://127.0.0.1:8765/v1/session]``.

It pushes an utterance (Piper speech at 48 kHz in 10 ms frames, as an agent's TTS does), interrupts a
second one half-way with ``clear_buffer``, and prints what the generator yields. In an agent, hand the
generator to ``AvatarRunner(room, audio_recv=..., video_gen=generator, options=avatar_options(generator))``
and the runner publishes the frames to the room.
"""

from __future__ import annotations

import asyncio
import collections
import sys

from livekit import rtc
from livekit.agents.voice.avatar import AudioSegmentEnd

from integrations.livekit import OnstageVideoGenerator, avatar_options
from server.media import pcm16
from server.voice import Voice

RATE = 48_000


async def say(generator: OnstageVideoGenerator, text: str) -> None:
    pcm = pcm16(Voice(RATE).synthesize(text).samples)
    step = RATE // 100 * 2
    for a in range(0, len(pcm), step):
        await generator.push_audio(rtc.AudioFrame(pcm[a : a + step], RATE, 1, len(pcm[a : a + step]) // 2))
    await generator.push_audio(AudioSegmentEnd())


async def main(url: str) -> None:
    generator = await OnstageVideoGenerator.connect(url)
    print("avatar options:", avatar_options(generator))
    counts: collections.Counter[str] = collections.Counter()

    async def watch() -> None:
        async for item in generator:
            counts[type(item).__name__] += 1
            if isinstance(item, AudioSegmentEnd):
                print("segment ended:", dict(counts))

    watcher = asyncio.create_task(watch())
    await say(generator, "Hello! This is the onstage avatar speaking.")
    await asyncio.sleep(4.0)
    await say(generator, "This sentence is cut off before it can finish, because the user interrupts.")
    await asyncio.sleep(1.0)
    await generator.clear_buffer()
    print("interrupted:", dict(counts))
    await asyncio.sleep(1.0)
    watcher.cancel()
    await generator.aclose()
    print("in all:", dict(counts))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "ws://127.0.0.1:8765/v1/session"))
