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
"""The client's rate is what it took over about this much time spent behind."""
FORGET_S = 3.0
"""A client not behind for this long has no known rate any more: it may have got faster."""


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
    """The bytes a connection's client has not taken, and how fast it takes them when it is behind.

    Only the time between two measurements that ends with bytes still pending tells the client's rate:
    it was busy taking them all along. Time it ended with nothing pending tells only what the server
    offered (a client that keeps up takes whatever comes), and counting it would take a fast client
    for a slow one whenever the server sends little.
    """

    def __init__(
        self,
        pending: Callable[[], int],
        clock: Callable[[], float] = time.monotonic,
        window_s: float = WINDOW_S,
        forget_s: float = FORGET_S,
    ) -> None:
        self._pending = pending
        self._clock = clock
        self._window_s = window_s
        self._forget_s = forget_s
        self._written = 0
        self._last: tuple[float, int] | None = None  # (time, bytes the client had taken by then)
        self._behind: deque[tuple[float, float, int]] = deque()  # (end, seconds, bytes taken) while behind

    @classmethod
    def of(cls, transport: asyncio.WriteTransport) -> Backlog:
        """The backlog of a connection: the transport's buffer plus the kernel's send queue."""
        return cls(lambda: transport.get_write_buffer_size() + kernel_send_queue(transport))

    def wrote(self, data: bytes | str) -> None:
        """Count a frame handed to the connection."""
        self._written += frame_bytes(data)

    def measure(self) -> tuple[int, float | None]:
        """(bytes the client has not taken yet, bytes a second it took over its last ``window_s`` of
        being behind; None if it has not been behind in the last ``forget_s``)."""
        now = self._clock()
        pending = self._pending()
        # Only differences of ``taken`` are used: bytes the count misses (pings) do not add up.
        taken = self._written - pending
        if self._last is not None and pending > 0 and now > self._last[0]:
            self._behind.append((now, now - self._last[0], taken - self._last[1]))
        self._last = (now, taken)
        while self._behind and now - self._behind[0][0] > self._forget_s:
            self._behind.popleft()
        while (
            len(self._behind) > 1
            and sum(s for _, s, _ in self._behind) - self._behind[0][1] >= self._window_s
        ):
            self._behind.popleft()
        if not self._behind:
            return pending, None
        return pending, sum(b for _, _, b in self._behind) / sum(s for _, s, _ in self._behind)
