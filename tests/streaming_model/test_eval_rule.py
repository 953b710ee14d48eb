"""The noise-floor rule on numbers made to sit on either side of it: a difference counts only when it is
both clear of chance (the paired interval excludes 0) and wider than the baseline's spread between seeds."""

from __future__ import annotations

import numpy as np
import pytest

from streaming_model.eval.verdict import Rule, compare

RULE = Rule()  # 95 %, one baseline standard deviation
BASE = np.random.default_rng(0).normal(1.0, 0.1, 20)


def _verdict(candidate: np.ndarray) -> str:
    return compare("m", list(BASE), list(candidate), RULE).verdict


def test_the_same_numbers_are_within_the_noise_floor() -> None:
    c = compare("m", list(BASE), list(BASE), RULE)
    assert c.verdict == "within the noise floor"
    assert c.difference == 0.0 and c.ci_low == 0.0 and c.ci_high == 0.0
    assert c.baseline_std == pytest.approx(float(np.std(BASE, ddof=1)))


def test_a_consistent_shift_smaller_than_the_seed_spread_is_within_it() -> None:
    shifted = BASE + 0.3 * np.std(BASE, ddof=1)  # clear of chance (every seed moved), but small
    c = compare("m", list(BASE), list(shifted), RULE)
    assert c.ci_low is not None and c.ci_low > 0
    assert c.verdict == "within the noise floor"


def test_a_shift_wider_than_the_seed_spread_differs() -> None:
    noise = np.random.default_rng(1).normal(0.0, 0.05, BASE.size)
    assert _verdict(BASE + 1.5 * np.std(BASE, ddof=1) + noise) == "differs"
    assert _verdict(BASE - 1.5 * np.std(BASE, ddof=1) + noise) == "differs"


def test_a_large_but_unclear_difference_is_within_the_noise_floor() -> None:
    # Half the seeds up, half down by a lot: the mean moved, but no more than chance moves it.
    swing = np.where(np.arange(BASE.size) % 2 == 0, 1.5, -1.0)
    c = compare("m", list(BASE), list(BASE + swing), RULE)
    assert c.difference is not None and abs(c.difference) > c.noise_floor  # type: ignore[operator]
    assert c.verdict == "within the noise floor"


def test_a_metric_every_baseline_seed_passes_differs_when_every_candidate_seed_fails() -> None:
    assert compare("shown.sit", [1.0] * 4, [0.0] * 4, RULE).verdict == "differs"
    assert compare("shown.sit", [1.0] * 4, [1.0, 1.0, 1.0, 0.0], RULE).verdict == "within the noise floor"


def test_seeds_that_measured_nothing_are_left_out_of_the_pairs() -> None:
    c = compare("m", [1.0, None, 3.0, 2.0], [1.5, 2.0, None, 2.5], RULE)
    assert c.seeds == 2 and c.baseline_mean == 1.5 and c.candidate_mean == 2.0
    assert compare("m", [1.0, None], [None, 2.0], RULE).verdict == "too few seeds"


@pytest.mark.parametrize("bad", [{"confidence": 1.0}, {"confidence": 0.2}, {"margin": -1.0}])
def test_a_rule_that_cannot_judge_is_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        Rule(**bad)
