"""An onstage session as a voice pipeline's avatar: the protocol client the Pipecat service and the LiveKit
video generator share.

It speaks protocol v1 and its extensions (docs/protocol.md) and nothing of the server's insides: it sends
the pipeline's TTS audio as the character's voice (binary kind 0x04 between ``voice.start`` and
``voice.end``, resampled to the session's ``audio_out_rate``), the user's speaking state
(``input.speech``), interrupts (``response.interrupt``) and behaviors (``plan.run``); and it yields what
the server sends as ``Beat``s, one per video frame with the audio slice sent with it, in presentation
order, each marked with the voice segment it carries, plus a ``SegmentEnd`` after a segment's last beat.

After ``interrupt()`` nothing of a segment that was playing or queued comes out as voice: beats in flight
from before the cut carry no audio.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import io
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np
import soxr
import websockets
from PIL import Image
from websockets.asyncio.client import ClientConnection

from server import protocol as p

QUEUE_FRAMES = 96
"""Beats kept for a consumer that falls behind (4 s at 24 fps); older ones are dropped."""


@dataclass(frozen=True)
class Beat:
    """One video frame of the character and the audio slice that goes with it."""

    pts_ms: float
    chunk: int
    frame: int  # within its chunk
    jpeg: bytes
    audio: bytes  # PCM16 LE mono at the session's audio_out_rate; silence when no voice sounds
    segment: int | None  # the voice segment (``OnstageSession.voice_start``) whose audio this is
    reflects: tuple[str, ...] = ()

    def rgb(self) -> np.ndarray:
        """The picture as (H, W, 3) uint8 RGB (decoding takes a moment: call it off the event loop)."""
        return np.asarray(Image.open(io.BytesIO(self.jpeg)).convert("RGB"))


@dataclass(frozen=True)
class SegmentEnd:
    """Voice segment ``segment`` is over: its last beat came just before this. ``interrupted`` when the
    server cut it (a story rewind, another client's interrupt); one this client cut gets none."""

    segment: int
    interrupted: bool = False


@dataclass
class _Segment:
    number: int
    server_id: str | None = None
    start_ms: float | None = None
    end_ms: float | None = None  # from voice.ended
    interrupted: bool = False
    reported: bool = False
    resampler: soxr.ResampleStream | None = field(default=None, repr=False)


class OnstageSession:
    """One onstage session driven by a voice pipeline; use as an async context manager.

    ``start`` holds the fields of ``session.start`` (say ``{"director": "none", "plan": ...}``).
    """

    def __init__(self, url: str, *, token: str | None = None, start: dict[str, Any] | None = None) -> None:
        self.url = url
        self.token = token
        self.start_fields = dict(start or {})
        self.started: p.SessionStarted | None = None
        self.dropped = 0  # beats dropped because the consumer fell behind
        self.missing = 0  # frames that never came (the server drops media for a client that falls behind)
        self._ws: ClientConnection | None = None
        self._reader: asyncio.Task[None] | None = None
        self._started: asyncio.Future[p.SessionStarted] | None = None
        self._out: asyncio.Queue[Beat | SegmentEnd] = asyncio.Queue(QUEUE_FRAMES)
        self._audio: dict[float, bytes] = {}  # audio slices waiting for their video frame, by pts
        self._segments: dict[int, _Segment] = {}
        self._by_ref: dict[str, _Segment] = {}
        self._by_id: dict[str, _Segment] = {}
        self._open: _Segment | None = None
        self._count = 0
        self._last_pts = -1.0
        self._ended = asyncio.Event()  # set whenever a segment ends, or the consumer has taken its end
        self._unseen: set[int] = set()  # segments whose SegmentEnd the consumer has not acted on yet
        self.errors: list[dict[str, Any]] = []
        self.endings: dict[int, tuple[float, bool]] = {}
        """What the server said of each segment's end: (``pts_ms``, ``interrupted``) of its ``voice.ended``."""

    # --------------------------------------------------------------------------- lifecycle

    async def __aenter__(self) -> OnstageSession:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def open(self, timeout: float = 30.0) -> p.SessionStarted:
        """Connect and start the session; returns ``session.started`` (``RuntimeError`` if refused)."""
        self._started = asyncio.get_running_loop().create_future()
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else None
        self._ws = await websockets.connect(
            self.url, additional_headers=headers, max_size=2**22, compression=None
        )
        self._reader = asyncio.create_task(self._read(), name="onstage-session")
        await self._send({"type": "session.start", **self.start_fields})
        self.started = await asyncio.wait_for(self._started, timeout)
        return self.started

    async def close(self) -> None:
        if self._ws is not None:
            await self._ws.close()
        if self._reader is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader

    @property
    def rate(self) -> int:
        """The session's audio rate (``audio_out_rate``): of the voice sent and the audio of every beat."""
        assert self.started is not None
        return self.started.audio_out_rate

    @property
    def frame_ms(self) -> float:
        assert self.started is not None
        return 1000.0 / self.started.fps

    async def beats(self) -> AsyncIterator[Beat | SegmentEnd]:
        """Beats in presentation order, and segment ends, until the connection closes."""
        while True:
            item = await self._out.get()
            yield item
            if isinstance(item, SegmentEnd):  # the consumer is back for more: it has acted on the end
                self._unseen.discard(item.segment)
                self._ended.set()

    # --------------------------------------------------------------------------- voice and input

    async def voice_start(self) -> int:
        """Open a voice segment (ending one still open); returns its number."""
        await self.voice_end()
        self._count += 1
        segment = self._open = self._segments[self._count] = _Segment(self._count)
        ref = f"voice{self._count}"
        self._by_ref[ref] = segment
        await self._send({"type": "voice.start", "ref": ref})
        return segment.number

    @property
    def speaking(self) -> int | None:
        """The open segment's number, if one is open."""
        return self._open.number if self._open is not None else None

    async def voice_audio(self, pcm: bytes, rate: int) -> None:
        """PCM16 LE mono audio at ``rate`` for the open segment (``RuntimeError`` if none is open)."""
        segment = self._open
        if segment is None:
            raise RuntimeError("no voice segment is open: call voice_start() first")
        if rate != self.rate:
            if segment.resampler is None:
                segment.resampler = soxr.ResampleStream(rate, self.rate, 1, dtype="int16")
            pcm = segment.resampler.resample_chunk(np.frombuffer(pcm, "<i2")).astype("<i2").tobytes()
        await self._send_voice(pcm)

    async def voice_end(self) -> int | None:
        """Close the open segment (its audio is all sent); returns its number, None if none was open."""
        segment, self._open = self._open, None
        if segment is None:
            return None
        if segment.resampler is not None:
            await self._send_voice(segment.resampler.resample_chunk(np.zeros(0, "<i2"), last=True).tobytes())
        await self._send({"type": "voice.end"})
        return segment.number

    async def interrupt(self) -> None:
        """Stop the character now: its voice (every segment sent so far) and what it is doing."""
        self._open = None
        cut = set(self._segments)
        self._segments.clear()
        self._unseen -= cut
        self._ended.set()
        # Beats already queued from before the cut keep their pictures and lose their voice.
        queued = [self._out.get_nowait() for _ in range(self._out.qsize())]
        for item in queued:
            if isinstance(item, Beat) and item.segment in cut:
                self._out.put_nowait(dataclasses.replace(item, audio=bytes(len(item.audio)), segment=None))
            elif not (isinstance(item, SegmentEnd) and item.segment in cut):
                self._out.put_nowait(item)
        await self._send({"type": "response.interrupt"})

    async def user_speech(self, speaking: bool) -> None:
        """The user started (True) or stopped speaking, as the pipeline's own VAD or turn detection says."""
        await self._send({"type": "input.speech", "state": "started" if speaking else "stopped"})

    async def run_plan(self, plan: dict[str, Any]) -> None:
        """Run a behavior plan (``plan.run``; docs/plans.md)."""
        await self._send({"type": "plan.run", "plan": plan})

    async def drain(self, timeout: float) -> None:
        """Wait (at most ``timeout`` s) until every segment sent has played, and the consumer of ``beats``
        has acted on its end, or was cut."""
        async with asyncio.timeout(timeout):
            while self._unseen or any(not s.reported for s in self._segments.values()):
                self._ended.clear()
                await self._ended.wait()

    # --------------------------------------------------------------------------- inside

    async def _send(self, message: dict[str, Any]) -> None:
        assert self._ws is not None
        await self._ws.send(json.dumps(message))

    async def _send_voice(self, pcm: bytes) -> None:
        assert self._ws is not None
        step = 2 * self.rate  # one second: the most one frame may hold
        for a in range(0, len(pcm), step):
            await self._ws.send(bytes([p.Kind.VOICE_IN]) + pcm[a : a + step])

    async def _read(self) -> None:
        assert self._ws is not None
        with contextlib.suppress(websockets.ConnectionClosed):
            async for data in self._ws:
                if isinstance(data, str):
                    self._message(json.loads(data))
                    continue
                kind, header, payload = p.decode_media(data)
                if kind is p.Kind.AUDIO_OUT:
                    self._audio[header["pts_ms"]] = payload
                elif kind is p.Kind.VIDEO:
                    self._video(header, payload)
        if self._started is not None and not self._started.done():
            self._started.set_exception(
                RuntimeError("the server closed the connection before the session started")
            )

    def _message(self, message: dict[str, Any]) -> None:
        kind = message.get("type")
        assert self._started is not None
        if kind == "session.started":
            self._started.set_result(msgspec.convert(message, p.SessionStarted))
        elif kind == "error":
            self.errors.append(message)
            if not self._started.done() and message.get("fatal"):
                self._started.set_exception(RuntimeError(f"session.start refused: {message['message']}"))
        elif kind == "input.accepted" and (segment := self._by_ref.pop(message.get("ref") or "", None)):
            segment.server_id = message["event_id"]
            self._by_id[segment.server_id] = segment
        elif kind == "voice.started" and (segment := self._by_id.get(message["segment"])):
            segment.start_ms = message["pts_ms"]
        elif kind == "voice.ended" and (segment := self._by_id.pop(message["segment"], None)):
            segment.end_ms, segment.interrupted = message["pts_ms"], message["interrupted"]
            self.endings[segment.number] = (segment.end_ms, segment.interrupted)
            if segment.start_ms is None:  # cut before it ever sounded
                segment.start_ms = segment.end_ms
            self._report_ends()

    def _video(self, header: dict[str, Any], jpeg: bytes) -> None:
        pts = header["pts_ms"]
        if self._last_pts >= 0:
            self.missing += max(0, round((pts - self._last_pts) / self.frame_ms) - 1)
        audio = self._audio.pop(pts, b"")
        for old in [t for t in self._audio if t < pts]:
            del self._audio[old]
        segment = self._voice_at(pts)
        beat = Beat(
            pts_ms=pts,
            chunk=header["chunk"],
            frame=header["frame"],
            jpeg=jpeg,
            audio=audio if segment is not None else bytes(len(audio)),
            segment=segment.number if segment is not None else None,
            reflects=tuple(header.get("reflects", ())),
        )
        self._put(beat)
        self._last_pts = pts
        self._report_ends()

    def _voice_at(self, pts: float) -> _Segment | None:
        """The segment sounding in the frame at ``pts`` (of those this client has not cut): the latest to
        start."""
        sounding = [
            s
            for s in self._segments.values()
            if s.start_ms is not None and s.start_ms <= pts and (s.end_ms is None or pts < s.end_ms)
        ]
        return max(sounding, key=lambda s: s.start_ms or 0.0, default=None)

    def _report_ends(self) -> None:
        """A ``SegmentEnd`` for each segment whose last frame has come out."""
        for segment in sorted(self._segments.values(), key=lambda s: s.number):
            if (
                segment.end_ms is not None
                and not segment.reported
                and self._last_pts + self.frame_ms >= segment.end_ms
            ):
                segment.reported = True
                del self._segments[segment.number]
                self._unseen.add(segment.number)
                self._put(SegmentEnd(segment.number, segment.interrupted))

    def _put(self, item: Beat | SegmentEnd) -> None:
        if self._out.full():
            self._out.get_nowait()
            self.dropped += 1
        self._out.put_nowait(item)
