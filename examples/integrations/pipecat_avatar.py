"""A Pipecat pipeline whose TTS speaks through an onstage character: run ``onstage serve`` first, then
``python examples/integrations/pipecat_avatar.py [ws://127.0.0.1:8765/v1/session]``.

No microphone, LLM or TTS service is needed: a stand-in for the pipeline's TTS speaks two sentences with
Piper (the voice onstage ships), the character nods at the second, and the frames that come out of
``OnstageVideoService`` (what the pipeline's output transport would play) are counted and saved as
``pipecat_avatar.webp``.
"""

from __future__ import annotations

import asyncio
import sys

from PIL import Image
from pipecat.frames.frames import (
    Frame,
    OutputImageRawFrame,
    TTSAudioRawFrame,
    TTSStartedFrame,
    TTSStoppedFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.tests.utils import SleepFrame, run_test

from integrations.pipecat import CharacterFrame, OnstageVideoService
from server.media import pcm16
from server.voice import Voice

TTS_RATE = 22_050  # Piper's own rate, as a Pipecat TTS service would send it


class Output(FrameProcessor):
    """Stands in for ``transport.output()``: keeps the pictures, counts the voice."""

    def __init__(self) -> None:
        super().__init__()
        self.pictures: list[Image.Image] = []
        self.voice_frames = 0

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, OutputImageRawFrame):
            self.pictures.append(Image.frombytes("RGB", frame.size, frame.image))
        elif isinstance(frame, TTSAudioRawFrame):
            self.voice_frames += 1
        await self.push_frame(frame, direction)


def speech(text: str) -> list[Frame]:
    pcm = pcm16(Voice(TTS_RATE).synthesize(text).samples)
    step = TTS_RATE // 10 * 2
    return [
        TTSStartedFrame(),
        *(TTSAudioRawFrame(pcm[a : a + step], TTS_RATE, 1) for a in range(0, len(pcm), step)),
        TTSStoppedFrame(),
    ]


async def main(url: str) -> None:
    service, output = OnstageVideoService(url), Output()
    frames = [
        SleepFrame(1.0),
        *speech("Hello! I am speaking with the pipeline's voice."),
        SleepFrame(3.0),
        CharacterFrame(behavior={"kind": "action", "name": "nod"}),
        *speech("And now I nod."),
        SleepFrame(3.0),
    ]
    await run_test(Pipeline([service, output]), frames_to_send=frames, start_timeout=30.0)
    print(f"{len(output.pictures)} pictures, {output.voice_frames} of them with the character's voice")
    if output.pictures:
        first, *rest = output.pictures
        first.save(
            "pipecat_avatar.webp", save_all=True, append_images=rest, duration=round(1000 / 24), loop=0
        )
        print("saved pipecat_avatar.webp")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "ws://127.0.0.1:8765/v1/session"))
