"""One client's WebRTC peer connection as the server's ``Connection``: tracks out, microphone and data
channel in.

What the client says arrives in one stream (``incoming``), as a WebSocket client's would: the data
channel's messages (text: JSON; binary: audio-in frames) and, once a session streams here, the microphone
track's audio as audio-in frames. Before that the microphone is read and dropped (aiortc would queue it
without bound), so audio that came before ``session.start`` is neither an error nor heard.

Out: media goes onto the tracks (bounded: see ``tracks``), everything else onto the data channel, where a
client that lets ``MAX_BUFFERED_BYTES`` pile up is closed (as a WebSocket client that falls far behind on
control messages is). The stream ends when the data channel or the peer connection closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Coroutine
from typing import Any

from aiortc import MediaStreamTrack, RTCDataChannel, RTCPeerConnection

from server.adapter import ProtocolAdapter
from server.core.outputs import AudioOut, Output, Sink, VideoOut
from server.webrtc import messages
from server.webrtc.mic import audio_in_frames
from server.webrtc.tracks import VIDEO_CLOCK_RATE, VideoTrack, VoiceTrack

log = logging.getLogger(__name__)

MAX_BUFFERED_BYTES = 4 * 1024 * 1024
"""Control messages the client has not taken yet, beyond which it is closed as too slow."""
MAX_INCOMING = 512
"""Client frames not handled yet (50 a second is the microphone's rate); past this the client is flooding."""


class RtcConnection:
    """A peer connection serving one client (``serve_client`` reads ``incoming``)."""

    def __init__(self, pc: RTCPeerConnection, audio_out_rate: int, max_video_frames: int, max_audio_s: float):
        self.pc = pc
        self.video = VideoTrack(max_video_frames)
        self.voice = VoiceTrack(audio_out_rate, max_audio_s)
        self.channel: RTCDataChannel | None = None
        self.live = asyncio.Event()
        """Set once a session streams to this connection (the server asked for its ``sink``)."""
        self._control_dropped = 0
        self._unsent: list[str] = []  # inputs whose chunk message came after the channel closed
        self._incoming: asyncio.Queue[str | bytes | None] = asyncio.Queue()
        self._clock_told = False
        self._tasks: set[asyncio.Task[None]] = set()
        self.closed = False
        pc.on("datachannel", self._on_channel)
        pc.on("track", self._on_track)
        pc.on("connectionstatechange", self._on_state)

    def add_tracks(self) -> None:
        """Offer the character's picture and voice (after the client's offer is set). The video goes one
        way: the protocol takes no picture from the client, so none is asked for."""
        self.video.sender = self.pc.addTrack(self.video)
        for transceiver in self.pc.getTransceivers():
            if transceiver.sender is self.video.sender:
                transceiver.direction = "sendonly"
        self.pc.addTrack(self.voice)

    # ------------------------------------------------------------------------------ in

    def _on_channel(self, channel: RTCDataChannel) -> None:
        if self.channel is not None:  # one control channel per client; the protocol needs no other
            channel.close()
            return
        self.channel = channel
        channel.on("message", self._take)
        channel.on("close", self._end)

    def _on_track(self, track: MediaStreamTrack) -> None:
        if track.kind == "audio":
            self._spawn(self._microphone(track))
        else:  # video was not asked for (``add_tracks``): nothing comes on it
            track.stop()

    def _on_state(self) -> None:
        if self.pc.connectionState in ("failed", "closed"):
            self._end()

    async def _microphone(self, track: MediaStreamTrack) -> None:
        async for frame in audio_in_frames(track):
            if self.live.is_set():
                self._take(frame)

    def _take(self, data: str | bytes) -> None:
        if self.closed:
            return
        if self._incoming.qsize() >= MAX_INCOMING:
            log.warning(
                "closing a WebRTC client that sent %d frames the server has not handled", MAX_INCOMING
            )
            self._spawn(self.hang_up(1008, "client too fast"))
            return
        self._incoming.put_nowait(data)

    def _end(self) -> None:
        self._incoming.put_nowait(None)

    async def incoming(self) -> AsyncIterator[str | bytes]:
        """What the client says, in order, until its channel or connection closes."""
        while (data := await self._incoming.get()) is not None:
            yield data

    # ------------------------------------------------------------------------------ out

    @property
    def dropped(self) -> int:
        return self.video.dropped + self.voice.dropped + self._control_dropped

    def _open(self) -> bool:
        return not self.closed and self.channel is not None and self.channel.readyState == "open"

    def unsent(self) -> list[str]:
        return list(self._unsent)

    async def put(self, data: bytes | str, droppable: bool) -> None:
        """A protocol frame onto the data channel (media frames go onto the tracks: see ``sink``)."""
        channel = self.channel
        if channel is None or not self._open():
            self._control_dropped += droppable
            return
        if channel.bufferedAmount > MAX_BUFFERED_BYTES:
            await self.hang_up(1008, "client too slow")
            return
        channel.send(data)

    def sink(self, adapter: ProtocolAdapter) -> Sink:
        """Video and voice onto their tracks, everything else onto the data channel."""
        self.live.set()

        async def send(item: Output) -> None:
            match item:
                case VideoOut():
                    if item.frame == 0 or item.reflects:
                        told = (
                            messages.VideoChunk.of(item) if item.frame == 0 else messages.VideoSplice.of(item)
                        )
                        if self._open():
                            await self.put(messages.encode(told), droppable=False)
                        else:  # the frame's message is what tells its inputs' outcome
                            self._unsent.extend(item.reflects)
                    await self._tell_clock()
                    self.video.put(item)
                case AudioOut():
                    self.voice.put(item)
                case _:
                    await self.put(adapter.encode(item), droppable=False)

        return send

    async def _tell_clock(self) -> None:
        if self._clock_told or self.video.first_sent is None:
            return
        self._clock_told = True
        pts_ms, rtp = self.video.first_sent
        clock = messages.VideoClock(pts_ms=pts_ms, rtp_timestamp=rtp, clock_rate=VIDEO_CLOCK_RATE)
        await self.put(messages.encode(clock), droppable=False)

    # ------------------------------------------------------------------------------ end

    async def close(self, flush_s: float = 1.0) -> None:
        """Stop the tracks; what the data channel holds gets ``flush_s`` to go out."""
        self.video.stop()
        self.voice.stop()
        channel = self.channel
        if channel is not None and channel.readyState == "open" and channel.bufferedAmount:
            drained = asyncio.Event()
            channel.on("bufferedamountlow", drained.set)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(drained.wait(), flush_s)

    async def hang_up(self, code: int, reason: str) -> None:
        """Close the peer connection (``code`` and ``reason`` are for the log: WebRTC carries neither)."""
        if self.closed:
            return
        self.closed = True
        log.debug("closing a WebRTC client: %s (%d)", reason, code)
        self._end()
        self.video.stop()
        self.voice.stop()
        await self.pc.close()
        for task in list(self._tasks):
            if task is not asyncio.current_task():
                task.cancel()

    def _spawn(self, job: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(job)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
