"""Token buckets: a burst is allowed, a sustained excess is refused, tokens come back with time."""

from __future__ import annotations

import pytest

from server.limits import TokenBucket
from tests.support.clock import ManualClock


def test_a_burst_passes_then_the_excess_is_refused_until_tokens_refill() -> None:
    clock = ManualClock()
    bucket = TokenBucket(rate=10.0, burst=5.0, clock=clock)
    assert [bucket.take() for _ in range(6)] == [True] * 5 + [False]
    clock.t = 0.25
    assert [bucket.take() for _ in range(3)] == [True, True, False]


def test_a_request_larger_than_what_is_left_takes_nothing() -> None:
    clock = ManualClock()
    bucket = TokenBucket(rate=1.0, burst=3.0, clock=clock)
    assert not bucket.take(4.0)
    assert bucket.take(3.0)


def test_tokens_never_exceed_the_burst() -> None:
    clock = ManualClock()
    bucket = TokenBucket(rate=100.0, burst=2.0, clock=clock)
    clock.t = 60.0
    assert [bucket.take() for _ in range(3)] == [True, True, False]


def test_a_bucket_needs_a_positive_rate_and_burst() -> None:
    with pytest.raises(ValueError):
        TokenBucket(rate=0.0, burst=1.0)
