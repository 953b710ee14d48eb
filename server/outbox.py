"""What a connection sends: control messages on a lane of their own ahead of media, and media only while
the client keeps up, so a slow client sees the call at most about a second late, never minutes, and the
server never holds unbounded memory or waits for it.

Media (video and audio frames, the binary ones) keeps its order on a lane of its own. It is dropped, and
counted, when it is older than ``max_age_s`` by the time it could be written, or when the client would
receive it more than ``backlog_s`` after it is written (behind its backlog: ``server.backlog``, the
transport's buffer and the kernel's send queue), unless it was put as not droppable: a video frame whose
``reflects`` names an input is that input's outcome (docs/protocol.md, Outcomes), so it always goes out,
in its place. Control messages are never dropped; a client so far behind that ``control_messages`` of
them wait is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from typing import NamedTuple

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from server.adapter import ProtocolAdapter
from server.backlog import Backlog, frame_bytes
from server.core.outputs import Output, Sink, answers, droppable


class _Media(NamedTuple):
    queued: float  # when it was put
    data: bytes
    keep: bool  # never dropped (it answers an input)
    answers: tuple[str, ...]  # the inputs it is the outcome of


class Outbox:
    """One sender task per connection; ``put`` never blocks the session."""

    def __init__(
        self,
        ws: ServerConnection,
        media_frames: int = 24,
        control_messages: int = 1024,
        max_age_s: float = 1.0,
        backlog_s: float = 0.5,
        backlog: Backlog | None = None,
    ) -> None:
        self.ws = ws
        self.dropped = 0
        self._media: deque[_Media] = deque()
        self._control: deque[str] = deque()
        self._media_max = media_frames
        self._control_max = control_messages
        self._max_age_s = max_age_s
        self._backlog_s = backlog_s
        self._backlog = backlog if backlog is not None else Backlog.of(ws.transport)
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()  # set whenever everything queued has been sent
        self._idle.set()
        self._task: asyncio.Task[None] | None = None
        self._sending: deque[_Media] = deque()  # the media being written now
        self._unsent: list[str] = []  # inputs whose answering frame came after the connection closed
        self.closed = False

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="outbox")

    async def put(self, data: bytes | str, droppable: bool, answers: tuple[str, ...] = ()) -> None:
        """Queue a frame: binary frames are media, text frames control. Media beyond ``media_frames``
        pending pushes out the oldest droppable media frame. ``answers``: the inputs a media frame is the
        outcome of (``unsent`` tells them if it never goes out)."""
        if self.closed:
            if droppable:
                self.dropped += 1
            self._unsent.extend(answers)
            return
        if isinstance(data, bytes):
            if len(self._media) >= self._media_max:
                self._push_out_oldest()
            self._media.append(_Media(time.monotonic(), data, keep=not droppable, answers=answers))
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
                    # Control first: a pong or an error must not wait behind video.
                    if self._control:
                        await self._send(self._control.popleft())
                        continue
                    self._sending = self._media_in_time()
                    while self._sending:
                        await self._send(self._sending[0].data)
                        self._sending.popleft()
                self._idle.set()
        except ConnectionClosed:
            self.closed = True

    async def _send(self, data: bytes | str) -> None:
        self._backlog.wrote(data)
        await self.ws.send(data)

    def unsent(self) -> list[str]:
        """Once the connection has closed: the inputs whose answering frame it never wrote."""
        queued = [a for m in (*self._sending, *self._media) for a in m.answers]  # from before it closed
        return [*queued, *self._unsent]

    def _push_out_oldest(self) -> None:
        oldest = next((m for m in self._media if not m.keep), None)
        if oldest is not None:
            self._media.remove(oldest)
            self.dropped += 1

    def _media_in_time(self) -> deque[_Media]:
        """Take the media queued (the frames due together, or more after a slow write) and keep what
        reaches the client in time: not older than ``max_age_s``, and all of it within ``backlog_s``
        behind what is pending at the rate the client takes bytes when it is behind (a client that has
        not been behind lately gets it all). A client that cannot take even that gets, once it has taken
        everything, the newest frame of each kind: it sees the call in steps rather than late. The rest
        is dropped, but for the frames put as not droppable."""
        now = time.monotonic()
        batch = [m for m in self._media if m.keep or now - m.queued <= self._max_age_s]
        self.dropped += len(self._media) - len(batch)
        self._media.clear()
        pending, rate = self._backlog.measure()
        size = sum(frame_bytes(m.data) for m in batch)
        if rate is not None and (rate <= 0 or (pending + size) / rate > self._backlog_s):
            newest = {m.data[0]: m for m in batch} if pending == 0 else {}
            kept = [m for m in batch if m.keep or newest.get(m.data[0]) is m]
            self.dropped += len(batch) - len(kept)
            batch = kept
        return deque(batch)

    def sink(self, adapter: ProtocolAdapter) -> Sink:
        """A session's outputs as protocol frames, media and all, into this WebSocket."""

        async def send(item: Output) -> None:
            await self.put(adapter.encode(item), droppable(item), answers(item))

        return send

    async def hang_up(self, code: int, reason: str) -> None:
        """Close the WebSocket with ``code``."""
        await self.ws.close(code, reason)

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
