"""A Python WebRTC client of the protocol (aiortc): for the tests, the benchmarks and the example.

It offers what a browser offers (video to receive, audio both ways: the character's voice in, its
microphone out; one data channel), signals through ``GET /v1/rtc``, and records what arrives with the
local monotonic time it arrived, in the shape ``server.client.Received`` has, so the same measurements
run over either transport. A video frame's header is rebuilt from the data channel: its ``pts_ms`` from
its RTP timestamp (aiortc hands frames on with timestamps counted from the first frame it received, which
on a loss-free path is the first frame sent, the one ``rtc.video_clock`` names), its ``chunk``, ``frame``
and ``reflects`` from the ``video.chunk`` messages (and ``video.splice``, for a later frame that reflects
an input, where the session splices: a ``video.splice`` that comes after its frame was placed is missed).
"""

from __future__ import annotations

import asyncio
import contextlib
import fractions
import json
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Any

import av
import numpy as np
from aiortc import (
    MediaStreamTrack,
    RTCConfiguration,
    RTCDataChannel,
    RTCPeerConnection,
    RTCSessionDescription,
)
from aiortc.mediastreams import MediaStreamError

from server import protocol as p
from server.client import Received, ReceivingClient, VideoFrame
from server.webrtc.endpoint import encode_offer
from server.webrtc.tracks import VIDEO_CLOCK_RATE

MIC_FRAME_S = 0.020
MIC_FRAME_SAMPLES = round(p.AUDIO_IN_RATE * MIC_FRAME_S)


class Microphone(MediaStreamTrack):
    """A microphone track: real-time 20 ms frames of silence, and ``play``'s sounds when asked."""

    kind = "audio"

    def __init__(self) -> None:
        super().__init__()
        self.frames_sent = 0
        self._queue: list[tuple[np.ndarray, asyncio.Future[tuple[float, float]]]] = []
        self._playing = np.zeros(0, dtype="<i2")
        self._start: float | None = None

    def play(self, pcm16: np.ndarray) -> asyncio.Future[tuple[float, float]]:
        """Queue int16 16 kHz samples; resolves to (local time their first frame was handed to the sender,
        their position in the microphone's audio in ms)."""
        future: asyncio.Future[tuple[float, float]] = asyncio.get_running_loop().create_future()
        self._queue.append((pcm16.astype("<i2"), future))
        return future

    async def recv(self) -> av.AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        if self._start is None:
            self._start = time.monotonic()
        if (wait := self._start + self.frames_sent * MIC_FRAME_S - time.monotonic()) > 0:
            await asyncio.sleep(wait)
        started = None
        if self._playing.size == 0 and self._queue:
            self._playing, started = self._queue.pop(0)
        samples = np.zeros(MIC_FRAME_SAMPLES, dtype="<i2")
        samples[: min(MIC_FRAME_SAMPLES, self._playing.size)] = self._playing[:MIC_FRAME_SAMPLES]
        self._playing = self._playing[MIC_FRAME_SAMPLES:]
        frame = av.AudioFrame.from_ndarray(samples.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = p.AUDIO_IN_RATE
        frame.pts = self.frames_sent * MIC_FRAME_SAMPLES
        frame.time_base = fractions.Fraction(1, p.AUDIO_IN_RATE)
        if started is not None and not started.done():
            started.set_result((time.monotonic(), self.frames_sent * MIC_FRAME_S * 1000.0))
        self.frames_sent += 1
        return frame


@dataclass
class RtcReceived(Received):
    """``Received`` for a WebRTC client: decoded pictures beside the frames, and the voice as it arrived
    (48 kHz stereo from Opus), not per video frame."""

    pictures_rgb: list[np.ndarray] = field(default_factory=list)
    voice: list[tuple[float, np.ndarray]] = field(default_factory=list)
    """(arrival time, mono float samples at 48 kHz) per audio frame."""

    def pictures(self, frames: list[VideoFrame] | None = None) -> np.ndarray:
        chosen = self.video if frames is None else frames
        index = {id(f): i for i, f in enumerate(self.video)}
        return np.stack([self.pictures_rgb[index[id(f)]] for f in chosen])

    def voice_loudness(self, frames: list[VideoFrame] | None = None) -> np.ndarray:
        """RMS of the voice that arrived while each video frame was the newest one (from its arrival to
        the next frame's): what a player showing frames and sound as they come puts together."""
        chosen = self.video if frames is None else frames
        arrivals = np.array([f.t for f in chosen])
        if arrivals.size < 2:
            return np.zeros(arrivals.size)
        ends = np.append(arrivals[1:], arrivals[-1] + np.median(np.diff(arrivals)))
        times = np.array([t for t, _ in self.voice])
        out = np.zeros(arrivals.size)
        for i, (start, end) in enumerate(zip(arrivals, ends, strict=True)):
            pieces = [s for _, s in self.voice[np.searchsorted(times, start) : np.searchsorted(times, end)]]
            if pieces:
                out[i] = float(np.sqrt(np.mean(np.concatenate(pieces) ** 2)))
        return out


class RtcSessionClient(ReceivingClient):
    """One WebRTC peer connection to a server at ``base`` (``http://host:port``); an async context
    manager. Waits and ``start`` are ``ReceivingClient``'s; the microphone is ``mic``."""

    received: RtcReceived

    def __init__(self, base: str, token: str | None = None, connect_timeout: float = 20.0) -> None:
        super().__init__(RtcReceived())
        self.base = base.rstrip("/")
        self.token = token
        self.connect_timeout = connect_timeout
        # No STUN server (aiortc's default is a public one): the server's answer holds its candidates.
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        self.mic = Microphone()
        self.channel: RTCDataChannel | None = None
        self.video_clock: dict[str, Any] | None = None
        self._chunks: list[dict[str, Any]] = []  # video.chunk messages, in order
        self._splices: dict[tuple[int, int], list[str]] = {}  # (chunk, frame) -> a video.splice's reflects
        self._unplaced: list[tuple[int, np.ndarray, float]] = []  # frames before their header is known
        self._tasks: list[asyncio.Task[None]] = []

    async def __aenter__(self) -> RtcSessionClient:
        self.pc.addTransceiver("video", direction="recvonly")
        self.pc.addTrack(self.mic)
        self.channel = self.pc.createDataChannel("onstage")
        opened = asyncio.Event()
        self.channel.on("open", opened.set)
        self.channel.on("message", self._on_message)
        self.pc.on("track", self._on_track)
        await self.pc.setLocalDescription(await self.pc.createOffer())
        answer = await asyncio.to_thread(self._signal, self.pc.localDescription.sdp)
        await self.pc.setRemoteDescription(RTCSessionDescription(sdp=answer["sdp"], type=answer["type"]))
        await asyncio.wait_for(opened.wait(), self.connect_timeout)
        return self

    def _signal(self, sdp: str) -> dict[str, Any]:
        url = f"{self.base}/v1/rtc?offer={encode_offer(sdp)}"
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as response:
            return json.load(response)

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, MediaStreamError):
                await task
        await self.pc.close()

    # ------------------------------------------------------------------------------ in

    def _on_track(self, track: MediaStreamTrack) -> None:
        reader = self._read_video(track) if track.kind == "video" else self._read_audio(track)
        self._tasks.append(asyncio.create_task(reader))

    async def _read_video(self, track: MediaStreamTrack) -> None:
        with contextlib.suppress(MediaStreamError):
            while True:
                frame = await track.recv()
                now = time.monotonic()
                assert isinstance(frame, av.VideoFrame) and frame.pts is not None
                self._unplaced.append((frame.pts, frame.to_ndarray(format="rgb24"), now))
                self._place()

    async def _read_audio(self, track: MediaStreamTrack) -> None:
        with contextlib.suppress(MediaStreamError):
            while True:
                frame = await track.recv()
                now = time.monotonic()
                assert isinstance(frame, av.AudioFrame)
                samples = frame.to_ndarray().astype(np.float64).reshape(-1, len(frame.layout.channels))
                self.received.voice.append((now, samples.mean(axis=1) / 32768.0))

    def _on_message(self, data: str | bytes) -> None:
        if not isinstance(data, str):
            return
        message = json.loads(data)
        if message.get("type") == "video.chunk":
            self._chunks.append(message)
        elif message.get("type") == "video.splice":
            self._splices[(message["chunk"], message["frame"])] = message["reflects"]
        elif message.get("type") == "rtc.video_clock":
            self.video_clock = message
        elif message.get("type") == "session.started":
            self.started = message
        self._got_message(time.monotonic(), message)
        self._place()

    def _place(self) -> None:
        """Give the frames that arrived a header, once the clock and their chunk are known."""
        if self.video_clock is None or self.started is None:
            return
        frame_ms = 1000.0 / self.started["fps"]
        while self._unplaced:
            ticks, picture, t = self._unplaced[0]
            pts_ms = self.video_clock["pts_ms"] + ticks * 1000.0 / VIDEO_CLOCK_RATE
            chunk = next((c for c in reversed(self._chunks) if c["pts_ms"] <= pts_ms + frame_ms / 2), None)
            if chunk is None or round((pts_ms - chunk["pts_ms"]) / frame_ms) >= self.started["chunk_frames"]:
                return  # its chunk's message has not come yet
            index = round((pts_ms - chunk["pts_ms"]) / frame_ms)
            header = {
                "chunk": chunk["chunk"],
                "frame": index,
                "pts_ms": pts_ms,
                "reflects": chunk["reflects"]
                if index == 0
                else self._splices.get((chunk["chunk"], index), []),
                "gen_chunk": chunk["gen_chunk"],
            }
            self._unplaced.pop(0)
            self.received.pictures_rgb.append(picture)
            self._got_frame(VideoFrame(header, b"", t))

    # ------------------------------------------------------------------------------ out

    async def send(self, message: dict[str, Any]) -> float:
        """Send a JSON message on the data channel; returns the local time it was sent."""
        assert self.channel is not None
        t = time.monotonic()
        self.channel.send(json.dumps(message))
        return t
