"""A report names each held action a configuration lost by the action held before it, with the seeds (and
their identities) that lost it, most seeds first; seeds run before the order was recorded say so, and the
report says their actions came in the manifest's order."""

from __future__ import annotations

from streaming_model.eval.losses import START, describe_losses, losses
from streaming_model.eval.options import RunOptions, Script
from streaming_model.eval.report import order_text
from streaming_model.eval.results import Results
from streaming_model.eval.runner import SeedScores
from streaming_model.eval.verdict import Rule


def _seed(seed: int, order: tuple[str, ...], lost: set[str]) -> SeedScores:
    metrics: dict[str, float | None] = {f"shown.{name}": 0.0 if name in lost else 1.0 for name in order}
    return SeedScores(seed=seed, metrics=metrics, drift=None, precision="fp32", seconds=1.0, order=order)


def test_each_lost_action_is_named_by_the_action_before_it_with_the_seeds_that_lost_it() -> None:
    scores = [
        _seed(0, ("walk_right", "sit", "wave"), {"wave"}),
        _seed(1, ("sit", "wave", "walk_right"), set()),
        _seed(6, ("walk_right", "sit", "wave"), {"wave", "walk_right"}),
        _seed(7, ("wave", "sit", "walk_right"), {"wave"}),
    ]
    assert losses(scores) == {
        ("wave", "sit"): [0, 6],
        ("walk_right", START): [6],
        ("wave", START): [7],
    }
    assert describe_losses(scores).splitlines() == [
        "- wave after sit: seeds 0 (identity 0), 6 (identity 0)",
        "- walk_right after the start: seed 6 (identity 0)",
        "- wave after the start: seed 7 (identity 1)",
    ]


def test_a_configuration_that_lost_nothing_says_so() -> None:
    scores = [_seed(0, ("sit", "wave"), set()), _seed(1, ("wave", "sit"), set())]
    assert losses(scores) == {}
    assert describe_losses(scores) == "every held action shown on every seed"


def test_seeds_without_a_recorded_order_are_not_guessed_at() -> None:
    old = SeedScores(seed=0, metrics={"shown.wave": 0.0}, drift=None, precision="fp32", seconds=1.0)
    assert losses([old]) == {}
    assert describe_losses([old]) == "(the order of the held actions was not recorded)"


def _run(scores: list[SeedScores], script: Script) -> Results:
    return Results(
        command="test",
        date="2026-01-01",
        wall_s=1.0,
        seeds=[s.seed for s in scores],
        script=script,
        rule=Rule(),
        baseline=RunOptions(),
        candidate=RunOptions(),
        baseline_scores=scores,
        candidate_scores=scores,
    )


def test_the_report_says_in_what_order_the_seeds_held_their_actions() -> None:
    drawn = [_seed(0, ("sit", "wave"), set()), _seed(1, ("wave", "sit"), set())]
    assert order_text(_run(drawn, Script(order="shuffled"))) == "in an order drawn from each seed"
    assert order_text(_run(drawn, Script(order="fixed"))) == "in one order on every seed"
    # Results written before seeds recorded their order decode with today's default, but held the
    # manifest's order.
    old = [SeedScores(seed=0, metrics={"shown.wave": 1.0}, drift=None, precision="fp32", seconds=1.0)]
    assert order_text(_run(old, Script())) == "in the manifest's order on every seed"
