"""The character's picture and voice as aiortc tracks, fed by the session's outputs as they are due.

The session core sends every frame at its presentation time (``server.core.media_out``), so a track only
hands on what it is given: the sender pulls ``recv`` and gets the next frame as soon as it is there. A
track holds at most ``max_frames`` frames not yet taken; beyond that the oldest are dropped and counted
(as the WebSocket's outbox drops media), so a sender that falls behind never makes the server hold an
unbounded queue, and the client sees the call late by a bounded amount.

Clocks: video frames carry ``pts`` on a 90 kHz clock (``VIDEO_CLOCK_RATE``) straight from each frame's
``pts_ms``: aiortc's own video clock (``VideoStreamTrack.next_timestamp``) assumes 30 fps, which would put
16 or 24 fps frames at the wrong times. The voice is cut into 20 ms frames (what Opus packs) and each is
handed on at its own time, not in a burst with its video frame: the receiver relates audio to video by the
send times its RTCP reports give, and a burst would make the voice seem up to a frame early.
"""

from __future__ import annotations

import asyncio
import fractions
import io
import time
from collections import deque

import av
import numpy as np
from aiortc import MediaStreamTrack, RTCRtpSender
from aiortc.mediastreams import MediaStreamError
from PIL import Image

from server.core.outputs import AudioOut, VideoOut

VIDEO_CLOCK_RATE = 90_000
VIDEO_TIME_BASE = fractions.Fraction(1, VIDEO_CLOCK_RATE)
AUDIO_PIECE_S = 0.020
"""Length of one audio frame handed to the sender: one Opus packet."""


def video_pts(pts_ms: float) -> int:
    """A frame's presentation time on the 90 kHz video clock."""
    return round(pts_ms * VIDEO_CLOCK_RATE / 1000.0)


def decode_jpeg(jpeg: bytes) -> av.VideoFrame:
    """One JPEG picture as a video frame (RGB; the encoder converts it to what it sends)."""
    with Image.open(io.BytesIO(jpeg)) as image:
        return av.VideoFrame.from_image(image.convert("RGB"))


class _Bounded:
    """A queue of at most ``max_items`` that drops (and counts) the oldest when full; ``get`` waits."""

    def __init__(self, max_items: int) -> None:
        self._items: deque[object] = deque()
        self._max = max_items
        self._ready = asyncio.Event()
        self.dropped = 0
        self.closed = False

    def put(self, item: object) -> None:
        if self.closed:
            self.dropped += 1
            return
        if len(self._items) >= self._max:
            self._items.popleft()
            self.dropped += 1
        self._items.append(item)
        self._ready.set()

    async def get(self) -> object:
        while not self._items:
            if self.closed:
                raise MediaStreamError
            self._ready.clear()
            await self._ready.wait()
        return self._items.popleft()

    def close(self) -> None:
        self.closed = True
        self._ready.set()


class VideoTrack(MediaStreamTrack):
    """The character's picture: each ``VideoOut`` decoded from its JPEG, at its own presentation time.

    ``first_sent`` is, once the first frame has gone out, its ``(pts_ms, RTP timestamp)``: a client
    relates later frames' RTP timestamps to their ``pts_ms`` through it (the sender adds a random offset to
    the timestamps it is given, and tells it to no one).
    """

    kind = "video"

    def __init__(self, max_frames: int) -> None:
        super().__init__()
        self._queue = _Bounded(max_frames)
        self.sender: RTCRtpSender | None = None
        """Set when the track is added to a peer connection: where its RTP timestamps are read."""
        self.first_sent: tuple[float, int] | None = None
        self._first_pts_ms: float | None = None

    @property
    def dropped(self) -> int:
        return self._queue.dropped

    def put(self, item: VideoOut) -> None:
        self._queue.put(item)

    async def recv(self) -> av.VideoFrame:
        self._note_first_sent()
        item = await self._queue.get()
        assert isinstance(item, VideoOut)
        frame = await asyncio.to_thread(decode_jpeg, item.jpeg)
        frame.pts = video_pts(item.pts_ms)
        frame.time_base = VIDEO_TIME_BASE
        if self._first_pts_ms is None:
            self._first_pts_ms = item.pts_ms
        return frame

    def _note_first_sent(self) -> None:
        """The sender asks for the next frame only once it has sent the last one: the RTP timestamp it
        last sent is the first frame's, the first time it asks again."""
        if self.first_sent is not None or self._first_pts_ms is None or self.sender is None:
            return
        # aiortc keeps the timestamp of the last packet it sent (for its RTCP reports) and has no public
        # way to tell it; tests/server/test_webrtc.py checks the frames a client gets against it.
        rtp = getattr(self.sender, "_RTCRtpSender__rtp_timestamp", None)
        if isinstance(rtp, int):
            self.first_sent = (self._first_pts_ms, rtp)

    def stop(self) -> None:
        self._queue.close()
        super().stop()


class VoiceTrack(MediaStreamTrack):
    """The character's voice: each ``AudioOut`` (PCM16 mono at ``rate``) cut into 20 ms frames, each
    handed on at its own time after the video frame it came with."""

    kind = "audio"

    def __init__(self, rate: int, max_s: float) -> None:
        super().__init__()
        self.rate = rate
        self._piece = round(rate * AUDIO_PIECE_S)
        self._queue = _Bounded(max(1, round(max_s / AUDIO_PIECE_S)))
        self._carry = np.zeros(0, dtype="<i2")  # samples short of a whole piece, sent with the next slice
        self._samples = 0  # pts of the next piece, in samples
        self._time_base = fractions.Fraction(1, rate)

    @property
    def dropped(self) -> int:
        return self._queue.dropped

    def put(self, item: AudioOut) -> None:
        now = time.monotonic()
        pcm = np.concatenate([self._carry, np.frombuffer(item.pcm, dtype="<i2")])
        whole = pcm.size // self._piece * self._piece
        for start in range(0, whole, self._piece):
            # Due when its first sample plays: the slice's own samples are due from now on.
            due = now + (start - self._carry.size) / self.rate
            self._queue.put((due, pcm[start : start + self._piece]))
        self._carry = pcm[whole:].copy()

    async def recv(self) -> av.AudioFrame:
        item = await self._queue.get()
        assert isinstance(item, tuple)
        due, samples = item
        if (wait := due - time.monotonic()) > 0:
            await asyncio.sleep(wait)
        frame = av.AudioFrame.from_ndarray(samples.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = self.rate
        frame.pts = self._samples
        frame.time_base = self._time_base
        self._samples += samples.size
        return frame

    def stop(self) -> None:
        self._queue.close()
        super().stop()
