"""A real WebSocket client that reads slowly: a raw TCP socket with a small receive buffer, read at a
fixed byte rate, speaking the protocol through websockets' sans-I/O ``ClientProtocol``.

A client library reads as fast as the server writes; a phone on a bad link does not. This one takes at
most ``rate`` bytes a second off its socket, so the server's writes back up in the kernel (the small
``SO_RCVBUF`` keeps the backlog on the server's side, where the server can see it). Everything parsed is
recorded with the local monotonic time its last byte was read.

    async with SlowClient(url, rate=9 * 1024) as client:
        await client.send({"type": "session.start"})
        await client.wait_for(lambda m: m.get("type") == "session.started")
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode
from websockets.http11 import Response
from websockets.uri import parse_uri

from server.protocol import Kind, decode_media

READ_PIECE = 512
"""Bytes taken off the socket per read: small, so the pace is even."""


@dataclass
class Arrival:
    """One message as the slow client saw it: text as JSON, media as (kind, header)."""

    t: float
    message: dict[str, Any] | None = None
    kind: Kind | None = None
    header: dict[str, Any] = field(default_factory=dict)


class SlowClient:
    """One connection read at ``rate`` bytes a second; use as an async context manager."""

    def __init__(self, url: str, rate: float, rcvbuf: int = 1024) -> None:
        self.url = url
        self.rate = rate
        self.rcvbuf = rcvbuf
        self.arrivals: list[Arrival] = []
        self.bytes_read = 0
        self._protocol = ClientProtocol(parse_uri(url), max_size=2**22)
        self._sock: socket.socket | None = None
        self._reader: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()
        self._open = asyncio.Event()

    async def __aenter__(self) -> SlowClient:
        uri = parse_uri(self.url)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        # Set before connecting: the window the kernel advertises is fixed by then.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.rcvbuf)
        sock.setblocking(False)
        loop = asyncio.get_running_loop()
        await loop.sock_connect(sock, (uri.host, uri.port))
        self._sock = sock
        self._protocol.send_request(self._protocol.connect())
        await self._flush()
        self._reader = asyncio.create_task(self._read())
        await asyncio.wait_for(self._open.wait(), 10)
        if self._protocol.handshake_exc is not None:
            raise self._protocol.handshake_exc
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        if self._sock is not None:
            self._sock.close()

    def messages(self) -> list[tuple[float, dict[str, Any]]]:
        """Text messages received so far, with their arrival times."""
        return [(a.t, a.message) for a in self.arrivals if a.message is not None]

    def video(self) -> list[Arrival]:
        """Video frames received so far."""
        return [a for a in self.arrivals if a.kind is Kind.VIDEO]

    async def send(self, message: dict[str, Any]) -> float:
        """Send a JSON message; returns the local time it was sent."""
        t = time.monotonic()
        self._protocol.send_text(json.dumps(message).encode())
        await self._flush()
        return t

    async def wait_for(self, predicate, timeout: float) -> tuple[float, dict[str, Any]]:
        """The first text message (received or coming) that ``predicate`` holds for, with its time."""
        found = await self.wait_arrival(lambda a: a.message is not None and predicate(a.message), timeout)
        assert found.message is not None
        return found.t, found.message

    async def wait_arrival(self, predicate: Callable[[Arrival], bool], timeout: float) -> Arrival:
        """The first arrival, text or media, (received or coming) that ``predicate`` holds for."""

        async def find() -> Arrival:
            while True:
                self._changed.clear()
                for arrival in self.arrivals:
                    if predicate(arrival):
                        return arrival
                await self._changed.wait()

        return await asyncio.wait_for(find(), timeout)

    async def _flush(self) -> None:
        assert self._sock is not None
        loop = asyncio.get_running_loop()
        for data in self._protocol.data_to_send():
            if data:
                await loop.sock_sendall(self._sock, data)

    async def _read(self) -> None:
        assert self._sock is not None
        loop = asyncio.get_running_loop()
        began = time.monotonic()
        while True:
            # Paced: after n bytes, the next read waits until n / rate seconds have passed.
            if (wait := began + self.bytes_read / self.rate - time.monotonic()) > 0:
                await asyncio.sleep(wait)
            data = await loop.sock_recv(self._sock, READ_PIECE)
            if not data:
                self._protocol.receive_eof()
                return
            self.bytes_read += len(data)
            self._protocol.receive_data(data)
            now = time.monotonic()
            for event in self._protocol.events_received():
                if isinstance(event, Response):
                    self._open.set()
                    continue
                assert isinstance(event, Frame)
                if event.opcode is Opcode.TEXT:
                    self.arrivals.append(Arrival(now, message=json.loads(bytes(event.data))))
                elif event.opcode is Opcode.BINARY:
                    kind, header, _ = decode_media(bytes(event.data))
                    self.arrivals.append(Arrival(now, kind=kind, header=header))
            self._changed.set()
            await self._flush()  # answers to the server's pings, a close
