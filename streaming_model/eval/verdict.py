"""The rule that calls a difference within the noise floor or not.

Both configurations run the same seeds, and a seed fixes the identity, the script and the noise, so the
comparison is paired: per seed d = candidate - baseline, over the seeds where both measured something.
A metric **differs** when both hold:

1. the difference is clear of chance: the ``confidence`` (95 %) Student-t interval of the mean of d
   excludes 0 (a paired t-test at 1 - confidence);
2. it is larger than the noise floor: |mean d| > ``margin`` (1.0) x the baseline's between-seed standard
   deviation, i.e. the candidate moved by more than seeds move the baseline.

Otherwise it is **within the noise floor**. Fewer than two paired seeds decide nothing ("too few seeds").
The first condition keeps a handful of unlucky seeds from failing a sound candidate; the second keeps a
consistent but tiny change (one a viewer could not tell from reseeding) from failing it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import msgspec
import numpy as np
from scipy import stats

Verdict = Literal["within the noise floor", "differs", "too few seeds"]


class Rule(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The rule's two parameters."""

    confidence: float = 0.95
    margin: float = 1.0  # x the baseline's between-seed standard deviation

    def __post_init__(self) -> None:
        if not 0.5 <= self.confidence < 1.0:
            raise ValueError(f"the confidence must be in [0.5, 1), not {self.confidence}")
        if not 0.0 <= self.margin < math.inf:
            raise ValueError(f"the margin must be a number >= 0, not {self.margin}")

    def statement(self) -> str:
        """The rule in one sentence, for a report."""
        return (
            f"a metric differs when the {self.confidence:.0%} paired Student-t interval of the mean per-seed "
            f"difference (candidate - baseline, same seeds) excludes 0 AND |mean difference| > "
            f"{self.margin:g} x the baseline's between-seed standard deviation; otherwise it is within the "
            "noise floor"
        )


class Comparison(msgspec.Struct, frozen=True, kw_only=True):
    """One metric, both configurations, and the verdict (None where a figure does not exist)."""

    metric: str
    seeds: int  # the paired seeds the figures are over
    verdict: Verdict
    baseline_mean: float | None = None
    candidate_mean: float | None = None
    baseline_std: float | None = None  # between seeds (ddof 1)
    candidate_std: float | None = None
    difference: float | None = None  # candidate mean - baseline mean
    ci_low: float | None = None  # the interval of the difference
    ci_high: float | None = None
    noise_floor: float | None = None  # margin x baseline_std: how far the difference may go


def compare(
    metric: str, baseline: Sequence[float | None], candidate: Sequence[float | None], rule: Rule
) -> Comparison:
    """Judge one metric from the per-seed values of both configurations (same seeds, same order)."""
    if len(baseline) != len(candidate):
        raise ValueError(f"{metric}: {len(baseline)} baseline seeds against {len(candidate)} candidate seeds")
    pairs = [(b, c) for b, c in zip(baseline, candidate, strict=True) if b is not None and c is not None]
    n = len(pairs)
    if n < 2:
        one = pairs[0] if pairs else (None, None)
        return Comparison(
            metric=metric, seeds=n, verdict="too few seeds", baseline_mean=one[0], candidate_mean=one[1]
        )
    b, c = np.array(pairs).T
    d = c - b
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    half = float(stats.t.ppf(0.5 + rule.confidence / 2, n - 1)) * sd / math.sqrt(n)
    low, high = mean - half, mean + half
    floor = rule.margin * float(b.std(ddof=1))
    clear = low > 0 or high < 0  # with sd 0 the interval is the point mean: clear unless d is all 0
    return Comparison(
        metric=metric,
        seeds=n,
        baseline_mean=float(b.mean()),
        candidate_mean=float(c.mean()),
        baseline_std=float(b.std(ddof=1)),
        candidate_std=float(c.std(ddof=1)),
        difference=mean,
        ci_low=low,
        ci_high=high,
        noise_floor=floor,
        verdict="differs" if clear and abs(mean) > floor else "within the noise floor",
    )
