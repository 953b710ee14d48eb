"""DIR/results.json: every per-seed number of a run, enough to rebuild its report."""

from __future__ import annotations

from pathlib import Path

import msgspec

from .options import RunOptions, Script
from .runner import SeedScores
from .verdict import Rule


class Results(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One ``onstage eval`` run: what was compared, over which seeds, and what each seed scored."""

    command: str  # the command line, as a person would rerun it
    date: str  # ISO date of the run
    wall_s: float
    seeds: list[int]
    script: Script
    rule: Rule
    baseline: RunOptions
    candidate: RunOptions
    baseline_scores: list[SeedScores]
    candidate_scores: list[SeedScores]


def save(results: Results, path: Path) -> None:
    """Write the results as indented JSON."""
    path.write_bytes(msgspec.json.format(msgspec.json.encode(results), indent=1))


def load(path: Path) -> Results:
    """Read results ``save`` wrote (``msgspec.ValidationError`` or ``msgspec.DecodeError`` if not)."""
    return msgspec.json.decode(path.read_bytes(), type=Results)
