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
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator

WINDOW_S = 5.0
"""The window a share is measured over: 30 chunks of the tiny model, long enough to hold a session's
every phase, short enough to see a session that just started."""


MEASURED_S = 1.0
"""A share is measured once this long has passed since a ``restart`` (six chunks of the tiny model);
before that it reads 0, not known yet (admission then goes by the model's warm-up costs)."""


class BusyMeter:
    """Busy intervals of one thread over a sliding window."""

    def __init__(self, window_s: float = WINDOW_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.window_s = window_s
        self._clock = clock
        self._spans: deque[tuple[float, float]] = deque()
        self._since: float | None = None  # when the work in progress began
        self._from = -math.inf  # when what the thread runs last changed (``restart``)
        self._lock = threading.Lock()

    def restart(self) -> None:
        """What the thread runs changed (a session joined it or left): measure from now on, so that the
        window does not average the new load with the old."""
        with self._lock:
            self._from = self._clock()

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
        return self._measured(self._clock() - self.window_s)[0]

    def share(self) -> float:
        """Busy seconds per second over the window, or since the last ``restart`` when that is nearer: 0.0
        (idle) .. 1.0; 0.0 while under ``MEASURED_S`` has passed since a restart (not known yet)."""
        busy, span = self._measured(self._from)
        return min(1.0, busy / span) if span >= MEASURED_S else 0.0

    def _measured(self, since: float) -> tuple[float, float]:
        """Busy seconds from ``since`` (at most ``window_s`` back) to now, and the seconds that spans."""
        now = self._clock()
        start = max(now - self.window_s, since)
        with self._lock:
            spans = [*self._spans, *(((self._since, now),) if self._since is not None else ())]
        return sum(max(0.0, min(end, now) - max(begin, start)) for begin, end in spans), now - start
