"""How busy a generator thread is: the share of the last few seconds it spent on chunk work, measured.

    meter = BusyMeter()
    with meter.busy():          # in the generator's thread, around each piece of work
        ...
    meter.share()               # from any thread: 0.0 (idle) .. 1.0 (never idle), work in progress counted

Wall time, not CPU time: a thread that waits for a core while other work runs is late all the same, so a
machine short of cores shows as busier generators. Admission reads it (``streaming_model.pool``).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator

WINDOW_S = 5.0
"""The window a share is measured over: 30 chunks of the tiny model, long enough to hold a session's
every phase, short enough to see a session that just started."""


class BusyMeter:
    """Busy intervals of one thread over a sliding window."""

    def __init__(self, window_s: float = WINDOW_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.window_s = window_s
        self._clock = clock
        self._spans: deque[tuple[float, float]] = deque()
        self._since: float | None = None  # when the work in progress began
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def busy(self) -> Iterator[None]:
        """Count the time inside as busy (calls do not nest)."""
        began = self._clock()
        with self._lock:
            self._since = began
        try:
            yield
        finally:
            ended = self._clock()
            with self._lock:
                self._since = None
                self._spans.append((began, ended))
                while self._spans and self._spans[0][1] < ended - self.window_s:
                    self._spans.popleft()

    def busy_s(self) -> float:
        """Seconds of the last ``window_s`` spent busy (a thread younger than the window was idle before)."""
        now = self._clock()
        start = now - self.window_s
        with self._lock:
            spans = [*self._spans, *(((self._since, now),) if self._since is not None else ())]
        return sum(max(0.0, min(end, now) - max(begin, start)) for begin, end in spans)

    def share(self) -> float:
        """Busy seconds per second over the window: 0.0 (idle) .. 1.0."""
        return min(1.0, self.busy_s() / self.window_s)
