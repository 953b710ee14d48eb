"""``onstage eval`` can tell: the shipped model, run by worker processes on the same seeds, is judged within
the noise floor of itself on every metric, and judged different where a damaged cache hurts it (actions,
mouth, identity). A shortened script (three actions, the talking segment, a 20-chunk drift session) on
five seeds keeps it to about 20 s on two cores. (Three were too few: on a Xeon with AMX the damage hurt one
seed's mouth half as much as another's, and the interval of three differences took in no change at all.)"""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from PIL import Image

from streaming_model.eval.compare import RESULTS, rebuild, run_eval
from streaming_model.eval.losses import describe_losses, losses
from streaming_model.eval.options import RunOptions, Script
from streaming_model.eval.report import comparisons, write_report
from streaming_model.eval.results import Results, save
from streaming_model.eval.runner import SeedScores, run_configurations
from streaming_model.eval.verdict import Comparison, Rule

pytestmark = pytest.mark.slow

SEEDS = (0, 1, 2, 3, 4)
SCRIPT = Script(actions=("walk_right", "sit", "wave"), side_turns=0, drift_chunks=20)
SOUND, DAMAGED = RunOptions(), RunOptions(cache_noise=2.0)
HURT = {"actions_shown": -1, "mouth_r": -1, "identity_dist": +1}  # and which way the damage moves them


class Runs(msgspec.Struct):
    baseline: list[SeedScores]
    again: list[SeedScores]
    damaged: list[SeedScores]
    progress: list[str]


@pytest.fixture(scope="module")
def runs() -> Runs:
    progress: list[str] = []
    labels = ("baseline", "again", "damaged")
    baseline, again, damaged = run_configurations(
        (SOUND, SOUND, DAMAGED), SEEDS, SCRIPT, jobs=2, progress=progress.append, labels=labels
    )
    return Runs(baseline, again, damaged, progress)


def _results(baseline: list[SeedScores], candidate: list[SeedScores], options: RunOptions) -> Results:
    return Results(
        command="test",
        date="2026-01-01",
        wall_s=1.0,
        seeds=list(SEEDS),
        script=SCRIPT,
        rule=Rule(),
        baseline=SOUND,
        candidate=options,
        baseline_scores=baseline,
        candidate_scores=candidate,
    )


def _judged(
    baseline: list[SeedScores], candidate: list[SeedScores], options: RunOptions
) -> dict[str, Comparison]:
    return {c.metric: c for _, c in comparisons(_results(baseline, candidate, options))}


def test_every_seed_of_every_configuration_ran_and_said_so(runs: Runs) -> None:
    assert len(runs.progress) == 3 * len(SEEDS)
    for label in ("baseline", "again", "damaged"):
        assert sorted(line.split(":")[0] for line in runs.progress if line.startswith(label)) == [
            f"{label} seed {s}" for s in SEEDS
        ]
    assert [s.seed for s in runs.damaged] == list(SEEDS)
    assert all(s.drift is not None and len(s.drift.identity_dist) == 2 for s in runs.baseline)
    # Each seed held the three actions in an order of its own, the same in every configuration.
    assert all(sorted(s.order) == sorted(SCRIPT.actions) for s in runs.baseline)
    assert len({s.order for s in runs.baseline}) > 1
    assert [s.order for s in runs.damaged] == [s.order for s in runs.baseline]


def test_two_identical_configurations_are_judged_within_the_noise_floor_on_every_metric(runs: Runs) -> None:
    judged = _judged(runs.baseline, runs.again, SOUND)
    assert set(judged) >= {"actions_shown", "mouth_r", "identity_dist", "drift.identity_rise", "shown.sit"}
    assert {c.verdict for c in judged.values()} == {"within the noise floor"}
    # Other worker processes, the same seeds: the same numbers, so the difference is none at all.
    assert [s.metrics for s in runs.again] == [s.metrics for s in runs.baseline]
    assert all(c.difference == 0.0 for c in judged.values())


def test_a_damaged_cache_is_judged_different_on_the_metrics_it_hurts(runs: Runs) -> None:
    judged = _judged(runs.baseline, runs.damaged, DAMAGED)
    for metric, worse in HURT.items():
        c = judged[metric]
        assert c.verdict == "differs", c
        assert c.difference is not None and c.difference * worse > 0, c


def test_the_report_states_the_rule_draws_both_plots_and_rebuilds_from_its_results(
    runs: Runs, tmp_path: Path
) -> None:
    results = _results(runs.baseline, runs.damaged, DAMAGED)
    save(results, tmp_path / RESULTS)
    judged = write_report(results, tmp_path)
    report = (tmp_path / "report.md").read_text()
    assert Rule().statement() in report
    for metric in HURT:
        assert any(
            row.startswith(f"| {metric} |") and row.endswith("| **differs** |") for row in report.splitlines()
        )
    for png in ("distributions.png", "drift.png"):
        with Image.open(tmp_path / png) as image:
            assert image.format == "PNG" and image.width > 600 and image.height > 250
        assert f"]({png})" in report
    # Every action the damaged cache lost is listed, by the action held before it.
    lost = sum(s.metrics[f"shown.{name}"] == 0.0 for s in runs.damaged for name in s.order)
    assert lost > 0 and sum(len(seeds) for seeds in losses(runs.damaged).values()) == lost
    assert describe_losses(runs.damaged) in report
    (tmp_path / "report.md").unlink()
    again, rejudged = rebuild(tmp_path)
    assert again == results and rejudged == judged
    assert (tmp_path / "report.md").read_text() == report
    # Another rule rejudges the same numbers: a margin of 1000 seed spreads lets the mouth pass; a metric
    # every baseline seed scored alike (spread 0: all actions shown, and on some CPUs the same colour
    # distance on every seed) still differs, since any change exceeds 1000 x 0.
    lenient = {c.metric: c for _, c in rebuild(tmp_path, Rule(margin=1000.0))[1]}
    assert lenient["mouth_r"].verdict == "within the noise floor"
    assert lenient["actions_shown"].verdict == "differs"
    for metric in HURT:
        spread = lenient[metric].baseline_std
        assert lenient[metric].verdict == ("differs" if spread == 0 else "within the noise floor"), metric
    assert Rule(margin=1000.0).statement() in (tmp_path / "report.md").read_text()


def test_an_eval_of_one_identity_runs_only_the_seeds_that_draw_it(tmp_path: Path) -> None:
    lines: list[str] = []
    script = Script(actions=("wave",), side_turns=0, drift_chunks=0)
    results, _ = run_eval(
        SOUND,
        SOUND,
        2,
        tmp_path,
        jobs=1,
        rule=Rule(),
        command="test",
        progress=lines.append,
        script=script,
        identity=3,
    )
    assert results.seeds == [3, 9] == [s.seed for s in results.candidate_scores]
    assert len(lines) == 4 and "- seeds: 2 ([3, 9])" in (tmp_path / "report.md").read_text()
