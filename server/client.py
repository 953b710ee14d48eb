"""A Python client of protocol v1: for ``onstage client``, the benchmarks and the end-to-end tests.

It records everything the server says with the local monotonic time it arrived, so callers can measure
reactions (input sent -> first frame whose ``reflects`` names the input's event) and frame timing.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import websockets
from PIL import Image
from websockets.asyncio.client import ClientConnection

from server.protocol import Kind, decode_media


@dataclass(frozen=True)
class VideoFrame:
    header: dict[str, Any]
    jpeg: bytes
    t: float  # time.monotonic() at arrival


@dataclass(frozen=True)
class AudioFrame:
    header: dict[str, Any]
    pcm: bytes
    t: float


@dataclass
class Received:
    """Everything a session sent, in arrival order per kind."""

    messages: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    video: list[VideoFrame] = field(default_factory=list)
    audio: list[AudioFrame] = field(default_factory=list)

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [m for _, m in self.messages if m.get("type") == kind]

    def first_reflecting(self, event_id: str) -> VideoFrame | None:
        return next((f for f in self.video if event_id in f.header.get("reflects", ())), None)

    def pictures(self, frames: list[VideoFrame] | None = None) -> np.ndarray:
        """The video frames (all, or those given) decoded to RGB, (N, H, W, 3) uint8."""
        chosen = self.video if frames is None else frames
        return np.stack([np.asarray(Image.open(io.BytesIO(f.jpeg)).convert("RGB")) for f in chosen])

    def voice_loudness(self, frames: list[VideoFrame] | None = None) -> np.ndarray:
        """RMS of the character's audio sent with each video frame (all, or those given), 0 for none."""
        rms = {
            a.header["pts_ms"]: float(np.sqrt(np.mean(np.frombuffer(a.pcm, "<i2").astype(np.float64) ** 2)))
            for a in self.audio
            if a.pcm
        }
        chosen = self.video if frames is None else frames
        return np.array([rms.get(f.header["pts_ms"], 0.0) for f in chosen])


class ReceivingClient:
    """What every client of the protocol keeps: what arrived, and waits on it (``send`` is the transport's)."""

    def __init__(self, received: Received | None = None) -> None:
        self.received = received if received is not None else Received()
        self.started: dict[str, Any] | None = None
        self._waiters: list[tuple[Any, asyncio.Future[dict[str, Any]]]] = []
        self._frame_waiters: list[tuple[Any, asyncio.Future[VideoFrame]]] = []

    async def send(self, message: dict[str, Any]) -> float:
        """Send a JSON message; returns the local time it was sent."""
        raise NotImplementedError

    def _got_message(self, t: float, message: dict[str, Any]) -> None:
        self.received.messages.append((t, message))
        self._resolve(self._waiters, message)

    def _got_frame(self, frame: VideoFrame) -> None:
        self.received.video.append(frame)
        self._resolve(self._frame_waiters, frame)

    @staticmethod
    def _resolve(waiters: list, item: Any) -> None:
        for entry in list(waiters):
            predicate, future = entry
            if not future.done() and predicate(item):
                future.set_result(item)
                waiters.remove(entry)

    async def wait_for(self, predicate, timeout: float = 10.0, since: int = 0) -> dict[str, Any]:
        """The first message (received as the ``since``-th or later, or coming) that ``predicate`` holds for."""
        for _, message in self.received.messages[since:]:
            if predicate(message):
                return message
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiters.append((predicate, future))
        return await asyncio.wait_for(future, timeout)

    async def wait_type(self, kind: str, timeout: float = 10.0, **fields: Any) -> dict[str, Any]:
        return await self.wait_for(
            lambda m: m.get("type") == kind and all(m.get(k) == v for k, v in fields.items()), timeout
        )

    async def wait_frame(self, predicate, timeout: float = 10.0) -> VideoFrame:
        """The first video frame (already received or coming) for which ``predicate(frame)`` holds."""
        for frame in self.received.video:
            if predicate(frame):
                return frame
        future: asyncio.Future[VideoFrame] = asyncio.get_running_loop().create_future()
        self._frame_waiters.append((predicate, future))
        return await asyncio.wait_for(future, timeout)

    async def start(self, timeout: float = 30.0, **fields: Any) -> dict[str, Any]:
        """``session.start`` with ``fields``; returns ``session.started`` (raises on an error instead)."""
        since = len(self.received.messages)
        await self.send({"type": "session.start", **fields})
        answer = await self.wait_for(lambda m: m.get("type") in ("session.started", "error"), timeout, since)
        if answer["type"] == "error":
            raise RuntimeError(f"session.start refused: {answer}")
        self.started = answer
        return answer


class SessionClient(ReceivingClient):
    """One connection to ``ws://host:port/v1/session``; use as an async context manager."""

    def __init__(self, url: str, token: str | None = None) -> None:
        super().__init__()
        self.url = url
        self.token = token
        self.ws: ClientConnection | None = None
        self._reader: asyncio.Task[None] | None = None

    async def __aenter__(self) -> SessionClient:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else None
        self.ws = await websockets.connect(
            self.url, additional_headers=headers, max_size=2**22, compression=None
        )
        self._reader = asyncio.create_task(self._read())
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self.ws is not None:
            await self.ws.close()
        if self._reader is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader

    async def _read(self) -> None:
        assert self.ws is not None
        with contextlib.suppress(websockets.ConnectionClosed):
            async for data in self.ws:
                now = time.monotonic()
                if isinstance(data, str):
                    self._got_message(now, json.loads(data))
                    continue
                kind, header, payload = decode_media(data)
                if kind is Kind.VIDEO:
                    self._got_frame(VideoFrame(header, payload, now))
                elif kind is Kind.AUDIO_OUT:
                    self.received.audio.append(AudioFrame(header, payload, now))

    async def send(self, message: dict[str, Any]) -> float:
        """Send a JSON message; returns the local time it was sent."""
        assert self.ws is not None
        t = time.monotonic()
        await self.ws.send(json.dumps(message))
        return t

    async def send_audio(self, pcm: bytes) -> float:
        assert self.ws is not None
        t = time.monotonic()
        await self.ws.send(b"\x01" + pcm)
        return t
