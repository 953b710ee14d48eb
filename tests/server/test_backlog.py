"""A connection's backlog: its client's rate is what it took while it was behind, and only that."""

from __future__ import annotations

from server.backlog import Backlog
from tests.support.clock import ManualClock


def test_the_rate_is_what_the_client_took_while_it_was_behind() -> None:
    clock, pending = ManualClock(), [0]
    backlog = Backlog(lambda: pending[0], clock, window_s=1.0, forget_s=3.0)
    assert backlog.measure() == (0, None)  # never behind: no rate to tell
    for _ in range(10):  # 10 000 bytes on the wire every 0.1 s; the client takes 5 000 of them
        backlog.wrote(bytes(9996))
        clock.t += 0.1
        pending[0] += 5000
        measured = backlog.measure()
    assert measured[0] == 50_000
    assert measured[1] is not None and abs(measured[1] - 50_000) < 1


def test_time_the_client_kept_up_does_not_count_and_an_old_rate_is_forgotten() -> None:
    clock, pending = ManualClock(), [0]
    backlog = Backlog(lambda: pending[0], clock, window_s=1.0, forget_s=3.0)
    backlog.measure()
    backlog.wrote(bytes(9996))
    clock.t += 0.5
    pending[0] = 5000  # behind: took 5 000 bytes in 0.5 s
    assert backlog.measure() == (5000, 10_000)
    backlog.wrote(bytes(996))
    clock.t += 2.0
    pending[0] = 0  # caught up: the 2 s say nothing of its rate
    assert backlog.measure() == (0, 10_000)
    clock.t += 1.5
    assert backlog.measure() == (0, None)  # not behind for longer than forget_s
