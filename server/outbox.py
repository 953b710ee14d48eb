"""What a connection sends: control messages in order, media frames dropped (and counted) when the
client cannot keep up, so a slow client never makes the server hold unbounded memory or wait."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed


class Outbox:
    """One sender task per connection; ``put`` never blocks the session."""

    def __init__(self, ws: ServerConnection, media_frames: int = 24, control_messages: int = 1024) -> None:
        self.ws = ws
        self.dropped = 0
        self._media: deque[bytes | str] = deque()
        self._control: deque[bytes | str] = deque()
        self._media_max = media_frames
        self._control_max = control_messages
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()  # set whenever everything queued has been sent
        self._idle.set()
        self._task: asyncio.Task[None] | None = None
        self.closed = False

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="outbox")

    async def put(self, data: bytes | str, droppable: bool) -> None:
        """Queue a frame. Media beyond ``media_frames`` pending pushes out the oldest media frame."""
        if self.closed:
            if droppable:
                self.dropped += 1
            return
        if droppable:
            if len(self._media) >= self._media_max:
                self._media.popleft()
                self.dropped += 1
            self._media.append(data)
            self._idle.clear()
        else:
            if len(self._control) >= self._control_max:
                # A client this far behind on control messages is gone in all but name.
                self.closed = True
                await self.ws.close(1008, "client too slow")
                return
            self._control.append(data)
        self._idle.clear()
        self._wake.set()

    async def _run(self) -> None:
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                while self._control or self._media:
                    # Control first: an error or a speech report must not wait behind video.
                    data = self._control.popleft() if self._control else self._media.popleft()
                    await self.ws.send(data)
                self._idle.set()
        except ConnectionClosed:
            self.closed = True

    async def close(self, flush_s: float = 1.0) -> None:
        """Stop sending; control messages already queued (a fatal error, say) get ``flush_s`` to go out."""
        if self._control and not self.closed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._idle.wait(), flush_s)
        self.closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
