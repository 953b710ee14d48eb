"""The client's microphone track into what the ears take: PCM 16-bit mono at 16 kHz.

Browsers send Opus, which aiortc decodes to 48 kHz stereo; PyAV's ``AudioResampler`` (FFmpeg's
swresample) mixes it down and resamples it. Each result becomes one protocol audio-in frame (kind byte
``0x01``, then the samples), so it meets exactly the rules a WebSocket client's audio meets.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import av
from aiortc import MediaStreamTrack
from aiortc.mediastreams import MediaStreamError

from server import protocol as p


class MicResampler:
    """Audio frames of any rate and layout in, PCM16 mono 16 kHz bytes out."""

    def __init__(self) -> None:
        self._resampler = av.AudioResampler(format="s16", layout="mono", rate=p.AUDIO_IN_RATE)

    def pcm16(self, frame: av.AudioFrame) -> bytes:
        """The samples of ``frame`` at 16 kHz mono (a few may come with the next frame: the filter's delay)."""
        return b"".join(out.to_ndarray().tobytes() for out in self._resampler.resample(frame))


async def audio_in_frames(track: MediaStreamTrack) -> AsyncIterator[bytes]:
    """The track's audio as protocol audio-in frames, until the track ends."""
    resampler = MicResampler()
    while True:
        try:
            frame = await track.recv()
        except MediaStreamError:
            return
        assert isinstance(frame, av.AudioFrame)
        if pcm := resampler.pcm16(frame):
            yield bytes([p.Kind.AUDIO_IN]) + pcm
