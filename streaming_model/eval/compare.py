"""The whole ``onstage eval`` run: both configurations over the same seeds, then DIR/results.json, and
DIR/report.md with its plots (which ``rebuild`` rewrites from results.json alone)."""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable
from pathlib import Path

import msgspec

from ..world.palette import NUM_IDENTITIES
from .metrics import Metric
from .options import RunOptions, Script
from .report import write_report
from .results import Results, load, save
from .runner import run_configurations
from .verdict import Comparison, Rule

RESULTS = "results.json"
Judged = tuple[Results, list[tuple[Metric, Comparison]]]  # the run, and every metric judged


def run_eval(
    baseline: RunOptions,
    candidate: RunOptions,
    seeds: int,
    out: Path,
    *,
    jobs: int,
    rule: Rule,
    command: str,
    progress: Callable[[str], None],
    script: Script | None = None,
    identity: int | None = None,
) -> Judged:
    """Run both configurations on seeds 0..seeds-1 (or, given an ``identity``, the first ``seeds`` seeds
    that draw that character: a seed draws identity ``seed % NUM_IDENTITIES``) and write out/results.json
    and the report."""
    if seeds < 2:
        raise ValueError("give at least 2 seeds: the noise floor is the spread between them")
    if jobs < 1:
        raise ValueError("give at least 1 job")
    if identity is not None and identity not in range(NUM_IDENTITIES):
        raise ValueError(f"the identities are 0 to {NUM_IDENTITIES - 1}, not {identity}")
    chosen = (
        range(seeds)
        if identity is None
        else range(identity, identity + NUM_IDENTITIES * seeds, NUM_IDENTITIES)
    )
    out.mkdir(parents=True, exist_ok=True)
    script = script or Script()
    started = time.monotonic()
    base, cand = run_configurations(
        (baseline, candidate), chosen, script, jobs, progress, labels=("baseline", "candidate")
    )
    results = Results(
        command=command,
        date=datetime.date.today().isoformat(),
        wall_s=time.monotonic() - started,
        seeds=list(chosen),
        script=script,
        rule=rule,
        baseline=baseline,
        candidate=candidate,
        baseline_scores=base,
        candidate_scores=cand,
    )
    save(results, out / RESULTS)
    return results, write_report(results, out)


def rebuild(out: Path, rule: Rule | None = None) -> Judged:
    """Rewrite out/report.md and its plots from out/results.json (judged by ``rule`` where given, else by
    the run's own)."""
    results = load(out / RESULTS)
    if rule is not None:
        results = msgspec.structs.replace(results, rule=rule)
    return results, write_report(results, out)
