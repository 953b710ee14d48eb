"""How late the server's event loop runs. Every session's decisions, sends and reflexes take turns on its
one thread, so whatever holds that thread delays them all: a chunk decided late is sent late.

``LoopLag`` measures it all the time (a timer's lateness, into ``/metrics``); ``StallReporter``, when
asked for (``[server] loop_stall_report_ms``), names the culprit: it logs where the loop's thread was
when the loop missed a beat for that long.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import threading
import time
import traceback
from collections.abc import Callable

log = logging.getLogger(__name__)

LAG_EVERY_S = 0.05
"""How often the lag is measured: 20 timers a second cost nothing beside a chunk's decision."""
STACK_FRAMES = 12
"""The innermost frames a stall report shows: enough to name the call, short enough to read in a log."""


class OnLoop:
    """Watching work that runs as a task on the server's event loop from ``start`` until ``stop``."""

    task_name = "watch"
    _task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Run on the running loop until ``stop``."""
        self._task = asyncio.get_running_loop().create_task(self._run(), name=self.task_name)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        raise NotImplementedError


class LoopLag(OnLoop):
    """A timer due every ``every_s``, and how late the loop ran it each time, given to ``observe``."""

    task_name = "loop-lag"

    def __init__(self, observe: Callable[[float], None], every_s: float = LAG_EVERY_S) -> None:
        self.observe = observe
        self.every_s = every_s

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + self.every_s
            await asyncio.sleep(self.every_s)
            self.observe(max(0.0, loop.time() - due))


class StallReporter:
    """A thread that asks the loop to run a marker and, when it has not run within ``after_s``, logs the
    stack of the loop's thread at that moment (what holds it), once per stall, with how long it lasted."""

    def __init__(self, loop: asyncio.AbstractEventLoop, after_s: float) -> None:
        self.loop = loop
        self.after_s = after_s
        self.stalls = 0
        """Stalls reported so far."""
        self._loop_thread = threading.get_ident()  # built on the loop's thread (``start_on``)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="loop-stall-reporter", daemon=True)

    @classmethod
    def start_on(cls, after_s: float) -> StallReporter:
        """Watch the running loop (call from its thread)."""
        reporter = cls(asyncio.get_running_loop(), after_s)
        reporter._thread.start()
        return reporter

    def stop(self) -> None:
        """Stop watching (the thread ends within ``after_s``; not joined: it may be waiting for this loop)."""
        self._stop.set()

    def _watch(self) -> None:
        while not self._stop.is_set():
            ran = threading.Event()
            posted = time.monotonic()
            try:
                self.loop.call_soon_threadsafe(ran.set)
            except RuntimeError:  # the loop closed
                return
            if ran.wait(self.after_s):
                self._stop.wait(self.after_s)  # a beat every after_s at most: the loop is not asked often
                continue
            stack = self._loop_stack()
            while not ran.wait(self.after_s):
                if self._stop.is_set():
                    return
            self.stalls += 1
            log.warning(
                "event loop held %.0f ms; its thread was in:\n%s",
                1000 * (time.monotonic() - posted),
                stack,
            )

    def _loop_stack(self) -> str:
        frame = sys._current_frames().get(self._loop_thread)
        if frame is None:
            return "  (the loop's thread is gone)"
        return "".join(traceback.format_stack(frame, limit=STACK_FRAMES))
