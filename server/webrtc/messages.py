"""The messages only a WebRTC client gets, on its data channel beside the protocol's own.

Over a WebSocket every video frame carries its header (``chunk``, ``pts_ms``, ``reflects``...); a video
track carries pictures and RTP timestamps only. So the data channel says, for each chunk, what its first
frame's header would have said (and for a later frame that reflects an input, what its header would have
said), and once, how RTP timestamps relate to ``pts_ms``.
"""

from __future__ import annotations

import msgspec

from server.core.outputs import VideoOut


class RtcMessage(msgspec.Struct, kw_only=True, tag_field="type"):
    """Base of the WebRTC-only server messages."""


class VideoChunk(RtcMessage, kw_only=True, tag="video.chunk"):
    """Chunk ``chunk`` starts on the video track with the frame at ``pts_ms`` (sent as it goes onto the
    track); ``reflects``: the events whose effect first entered the generation in this chunk."""

    chunk: int
    gen_chunk: int
    pts_ms: float
    reflects: list[str]

    @classmethod
    def of(cls, frame: VideoOut) -> VideoChunk:
        return cls(
            chunk=frame.chunk, gen_chunk=frame.gen_chunk, pts_ms=frame.pts_ms, reflects=list(frame.reflects)
        )


class VideoSplice(RtcMessage, kw_only=True, tag="video.splice"):
    """The frame at ``pts_ms`` (frame ``frame`` of chunk ``chunk``, not its first) goes onto the track and
    is the first to reflect ``reflects``: a reaction spliced into the chunk playing (a session whose
    ``session.start`` asked for ``splice``)."""

    chunk: int
    frame: int
    gen_chunk: int
    pts_ms: float
    reflects: list[str]

    @classmethod
    def of(cls, frame: VideoOut) -> VideoSplice:
        return cls(
            chunk=frame.chunk,
            frame=frame.frame,
            gen_chunk=frame.gen_chunk,
            pts_ms=frame.pts_ms,
            reflects=list(frame.reflects),
        )


class VideoClock(RtcMessage, kw_only=True, tag="rtc.video_clock"):
    """The frame at ``pts_ms`` went out with RTP timestamp ``rtp_timestamp``; the video clock runs at
    ``clock_rate`` Hz, so the frame at ``t`` ms has ``(rtp_timestamp + round((t - pts_ms) * clock_rate
    / 1000)) mod 2**32``."""

    pts_ms: float
    rtp_timestamp: int
    clock_rate: int


def encode(message: RtcMessage) -> str:
    """A WebRTC-only message as the text of one data-channel message."""
    return msgspec.json.encode(message).decode()
