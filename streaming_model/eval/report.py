"""DIR/report.md and its plots, from a run's results (so a report can be rebuilt from results.json)."""

from __future__ import annotations

from pathlib import Path

import msgspec

from . import plots
from .losses import describe_losses
from .metrics import Metric, catalogue
from .options import RunOptions
from .results import Results
from .verdict import Comparison, compare

DISTRIBUTIONS, DRIFT = "distributions.png", "drift.png"
_ORDERS = {"fixed": "in one order on every seed", "shuffled": "in an order drawn from each seed"}


def comparisons(results: Results) -> list[tuple[Metric, Comparison]]:
    """Every metric of the run's script, judged by the run's rule."""
    script = results.script
    return [
        (
            metric,
            compare(
                metric.name,
                [s.metrics.get(metric.name) for s in results.baseline_scores],
                [s.metrics.get(metric.name) for s in results.candidate_scores],
                results.rule,
            ),
        )
        for metric in catalogue(script.actions, script.side_turns, script.drift_chunks > 0)
    ]


def write_report(results: Results, out: Path) -> list[tuple[Metric, Comparison]]:
    """Write out/report.md and its PNGs; the judged metrics."""
    judged = comparisons(results)
    labels = _labels(results.baseline, results.candidate)
    scores = (results.baseline_scores, results.candidate_scores)
    plots.distributions([c for _, c in judged], scores, labels, out / DISTRIBUTIONS)
    has_drift = results.script.drift_chunks > 0
    if has_drift:
        plots.drift(scores, labels, out / DRIFT)
    (out / "report.md").write_text(markdown(results, judged, has_drift))
    return judged


def verdict_table(judged: list[tuple[Metric, Comparison]], confidence: float) -> str:
    """The markdown table of every metric's figures and verdict."""
    lines = [
        f"| metric | baseline mean (std) | candidate mean (std) | difference [{confidence:.0%} CI] | "
        "noise floor | verdict |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for _, c in judged:
        verdict = f"**{c.verdict}**" if c.verdict == "differs" else c.verdict
        lines.append(
            f"| {c.metric} | {_n(c.baseline_mean)} ({_n(c.baseline_std)}) | {_n(c.candidate_mean)} "
            f"({_n(c.candidate_std)}) | {_signed(c.difference)} [{_signed(c.ci_low)}, {_signed(c.ci_high)}] | "
            f"{_n(c.noise_floor)} | {verdict} |"
        )
    return "\n".join(lines)


def markdown(results: Results, judged: list[tuple[Metric, Comparison]], has_drift: bool) -> str:
    """The whole report."""
    differ = [c.metric for _, c in judged if c.verdict == "differs"]
    precisions = {
        side: sorted({f"{s.precision} with {s.linears} linears, {s.kernels} kernels" for s in scores})
        for side, scores in (("baseline", results.baseline_scores), ("candidate", results.candidate_scores))
    }
    summary = (
        f"**{len(differ)} of {len(judged)} metrics differ**: {', '.join(differ)}."
        if differ
        else f"**All {len(judged)} metrics are within the noise floor.**"
    )
    script = results.script
    parts = [
        "# onstage eval",
        "",
        f"`{results.command}` ({results.date}, {results.wall_s / 60:.1f} min)",
        "",
        f"- baseline: `{results.baseline.describe()}` (computed in {', '.join(precisions['baseline'])})",
        f"- candidate: `{results.candidate.describe()}` (computed in {', '.join(precisions['candidate'])})",
        f"- seeds: {len(results.seeds)} ({_seed_range(results.seeds)}), the same for both; a seed fixes the "
        "identity, the script's random choices and the sampling noise",
        f"- script: {len(script.actions)} held actions ({order_text(results)}), {script.side_turns} side "
        f"turns, a talking segment, a last walk; drift: "
        f"{f'a {script.drift_chunks}-chunk session' if has_drift else 'left out'}",
        "",
        f"Rule: {results.rule.statement()}. The noise floor column is that margin.",
        "",
        summary,
        "",
        verdict_table(judged, results.rule.confidence),
        "",
        f"![per-metric distributions]({DISTRIBUTIONS})",
        "",
    ]
    if has_drift:
        parts += [f"![drift over the long session]({DRIFT})", ""]
    parts += [
        "## Held actions not shown",
        "",
        "Each named by the action held before it (2 idle chunks apart).",
        "",
    ]
    for side, scores in (("baseline", results.baseline_scores), ("candidate", results.candidate_scores)):
        parts += [f"{side}:", "", describe_losses(scores), ""]
    parts += ["## What each metric measures", ""]
    better = {+1: "higher is better", -1: "lower is better", 0: ""}
    parts += [
        f"- `{m.name}`: {m.meaning}" + (f" ({better[m.better]})" if m.better else "") for m, _ in judged
    ]
    return "\n".join(parts) + "\n"


def order_text(results: Results) -> str:
    """In what order the run's seeds held their actions: a run whose seeds recorded none came before the
    order could be drawn, and held them in the manifest's order (whatever its script now decodes as)."""
    if not any(s.order for s in (*results.baseline_scores, *results.candidate_scores)):
        return "in the manifest's order on every seed"
    return _ORDERS[results.script.order]


def _labels(baseline: RunOptions, candidate: RunOptions) -> tuple[str, str]:
    """Each configuration by the options in which it differs from the other (the plots' titles)."""
    a, b = msgspec.structs.asdict(baseline), msgspec.structs.asdict(candidate)
    differ = [name for name in a if a[name] != b[name]]
    if not differ:
        return "as the candidate", "as the baseline"
    return baseline.describe(differ), candidate.describe(differ)


def _n(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def _signed(value: float | None) -> str:
    return "–" if value is None else f"{value:+.3f}"


def _seed_range(seeds: list[int]) -> str:
    return f"{seeds[0]}..{seeds[-1]}" if seeds == list(range(seeds[0], seeds[-1] + 1)) else str(seeds)
