"""A client's microphone in a test: 16 kHz audio sent in real time, frame by frame, as a browser would."""

from __future__ import annotations

import asyncio
import time

import numpy as np

from server.client import SessionClient
from server.media import pcm16

FRAME_S = 0.02  # 20 ms a frame, as the page sends


class Sent:
    """When each part of the audio went out: (samples sent so far, monotonic time)."""

    def __init__(self) -> None:
        self.marks: list[tuple[int, float]] = []

    def when(self, samples: int) -> float:
        """The moment the frame holding sample ``samples`` went out."""
        return next(t for n, t in self.marks if n >= samples)


async def speak_into(client: SessionClient, audio: np.ndarray, frame_s: float = FRAME_S) -> Sent:
    """Send ``audio`` (16 kHz float) in real time, a frame every ``frame_s``; says when each part went out."""
    sent = Sent()
    step = round(16_000 * frame_s)
    for start in range(0, audio.size, step):
        await client.send_audio(pcm16(audio[start : start + step]))
        sent.marks.append((min(audio.size, start + step), time.monotonic()))
        await asyncio.sleep(frame_s)
    return sent
