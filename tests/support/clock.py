"""Clocks that move only when a test (or the code under test) moves them: ``ManualClock`` for code that
takes a ``clock`` callable, ``VirtualClock`` for a session's schedule."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class ManualClock:
    """Returns ``t``; a test advances ``t`` by hand."""

    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class SteppedClock:
    """A session clock (``server.core.schedule.Clock``) that moves only when the test calls ``advance``:
    sleepers and callbacks wait for it, however long the work between takes in real time. What waits,
    and until when, is ``pending``."""

    def __init__(self, t: float = 0.0) -> None:
        self.t = t
        self._timers: list[_Timer] = []

    def time(self) -> float:
        return self.t

    async def sleep_until(self, t: float) -> None:
        if t <= self.t:
            await asyncio.sleep(0)
            return
        woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def wake() -> None:
            if not woken.done():
                woken.set_result(None)

        timer = self.call_at(t, wake)
        try:
            await woken
        finally:
            timer.cancel()

    def call_at(self, t: float, callback: Callable[[], None]) -> _Timer:
        timer = _Timer(t, callback)
        if t <= self.t:
            asyncio.get_running_loop().call_soon(timer.fire)
        else:
            self._timers.append(timer)
        return timer

    def pending(self) -> list[float]:
        """The times something waits for, earliest first."""
        self._timers = [timer for timer in self._timers if not timer.cancelled]
        return sorted(timer.t for timer in self._timers)

    def advance(self, t: float) -> None:
        """Move the time to ``t`` (if later) and run the callbacks now due, earliest first."""
        self.t = max(self.t, t)
        due = sorted((timer for timer in self._timers if timer.t <= self.t), key=lambda timer: timer.t)
        for timer in due:
            self._timers.remove(timer)
            timer.fire()


class VirtualClock(SteppedClock):
    """A session clock (``server.core.schedule.Clock``) in virtual time: sleeping until t moves the time
    to t at once (never back), and callbacks set for a time run when the time reaches it."""

    def __init__(self, t: float = 0.0) -> None:
        super().__init__(t)
        self.slept: list[float] = []
        """Every time a sleeper asked to sleep until, in order."""

    async def sleep_until(self, t: float) -> None:
        self.slept.append(t)
        self.advance(t)
        await asyncio.sleep(0)

    def call_at(self, t: float, callback: Callable[[], None]) -> _Timer:
        timer = _Timer(t, callback)
        self._timers.append(timer)
        self.advance(self.t)
        return timer


class _Timer:
    def __init__(self, t: float, callback: Callable[[], None]) -> None:
        self.t, self.callback, self.cancelled = t, callback, False

    def cancel(self) -> None:
        self.cancelled = True

    def fire(self) -> None:
        """Run the callback, unless it was called off."""
        if not self.cancelled:
            self.callback()
