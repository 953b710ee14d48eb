"""How far behind a client is: the bytes written to its connection that it has not taken yet, and how
long they will take to reach it at the rate it has been taking them.

A connection's backlog hides in two places that ``websockets`` does not bound together: the asyncio
transport's buffer and the kernel's socket send queue. On Linux the send queue grows with the connection
(``tcp_wmem`` up to 4 MiB): at 9 KiB/s that is minutes of video already written, which no later drop can
take back. So the sender asks, before it writes media, how much is pending and how fast the client has been
taking it: media that would arrive too late is not written at all.
"""

from __future__ import annotations

import asyncio
import fcntl
import struct
import termios
import time
from collections import deque
from collections.abc import Callable

WINDOW_S = 1.0
"""The client's rate is what it took over about this long."""


def frame_bytes(data: bytes | str) -> int:
    """Bytes a server's WebSocket frame of ``data`` puts on the wire (unmasked, no extensions)."""
    n = len(data.encode()) if isinstance(data, str) else len(data)
    return n + 2 + (2 if 126 <= n < 65536 else 8 if n >= 65536 else 0)


def kernel_send_queue(transport: asyncio.BaseTransport) -> int:
    """Bytes in the socket's kernel send queue (sent but not acknowledged, or not sent yet); 0 where the
    platform cannot say."""
    sock = transport.get_extra_info("socket")
    if sock is None:
        return 0
    try:
        raw = fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0")
    except (OSError, ValueError):
        return 0
    return struct.unpack("i", raw)[0]


class Backlog:
    """The bytes a connection's client has not taken, and the seconds it would take to take them."""

    def __init__(
        self,
        pending: Callable[[], int],
        clock: Callable[[], float] = time.monotonic,
        window_s: float = WINDOW_S,
    ) -> None:
        self._pending = pending
        self._clock = clock
        self._window_s = window_s
        self._written = 0
        self._taken: deque[tuple[float, int]] = deque()  # (time, bytes the client had taken by then)

    @classmethod
    def of(cls, transport: asyncio.WriteTransport) -> Backlog:
        """The backlog of a connection: the transport's buffer plus the kernel's send queue."""
        return cls(lambda: transport.get_write_buffer_size() + kernel_send_queue(transport))

    def wrote(self, data: bytes | str) -> None:
        """Count a frame handed to the connection."""
        self._written += frame_bytes(data)

    def measure(self) -> tuple[int, float]:
        """(bytes the client has not taken yet, bytes a second it took over about the last ``window_s``;
        0 until there is a history to tell)."""
        now = self._clock()
        pending = self._pending()
        # Only differences of ``taken`` are used: bytes the count misses (pings) do not add up.
        taken = self._written - pending
        self._taken.append((now, taken))
        while len(self._taken) > 2 and now - self._taken[1][0] >= self._window_s:
            self._taken.popleft()
        t0, taken0 = self._taken[0]
        return pending, (taken - taken0) / (now - t0) if now > t0 else 0.0
