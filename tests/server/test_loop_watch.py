"""The event loop's lag is measured, and a stall is reported with where the loop's thread was."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from server.loop_watch import LoopLag, StallReporter

HOLD_S = 0.3


def _hold_the_loop() -> None:
    """What a callback that blocks the loop looks like: synchronous work on the loop's thread."""
    time.sleep(HOLD_S)


async def _until(done, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def test_a_callback_that_holds_the_loop_shows_as_lag_of_about_its_length() -> None:
    lags: list[float] = []
    probe = LoopLag(lags.append, every_s=0.05)
    probe.start()
    await _until(lambda: len(lags) >= 1)  # the probe runs
    _hold_the_loop()
    seen = len(lags)
    await _until(lambda: len(lags) > seen)
    await probe.stop()
    # The timer came due at most every_s after the hold began and ran only once the hold ended.
    assert max(lags) >= HOLD_S - probe.every_s
    assert min(lags) >= 0.0


async def test_a_stall_is_logged_once_with_the_call_that_held_the_loop(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="server.loop_watch")
    reporter = StallReporter.start_on(after_s=0.1)
    try:
        await asyncio.sleep(0.3)  # the reporter's beats run while the loop answers
        _hold_the_loop()
        await _until(lambda: reporter.stalls >= 1)
        await asyncio.sleep(0.3)
    finally:
        reporter.stop()
    reports = [r.getMessage() for r in caplog.records if r.name == "server.loop_watch"]
    # Once for the hold, naming it: where the loop's thread was. (A loaded machine may add stalls of its
    # own, a garbage collection say: those name something else.)
    (report,) = [r for r in reports if "_hold_the_loop" in r]
    assert report.startswith("event loop held")
    # The report's marker was posted at most one beat (after_s) into the hold, by a thread a loaded machine
    # may wake late: the time it names is past the stall threshold, not necessarily near the whole hold.
    held_ms = float(report.split("held ")[1].split(" ms")[0])
    assert held_ms >= 1000 * reporter.after_s
