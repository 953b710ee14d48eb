"""Two checkouts measured in turns (this, other, this, ...), so that a change in the machine's load falls on
both and their figures can be compared as a ratio from one run: the ``--against`` of the benchmarks that
compare code (render.py, probes.py, startup.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parent.parent
"""This checkout."""

T = TypeVar("T")


def checkouts(against: Path | None) -> dict[str, Path]:
    """``this`` checkout, and ``other`` where ``--against`` names one."""
    return {"this": ROOT} | ({"other": against.resolve()} if against else {})


def in_turns(roots: dict[str, Path], rounds: int, measure: Callable[[Path], T]) -> dict[str, list[T]]:
    """``measure(root)`` of every checkout, round by round, with progress on stderr."""
    results: dict[str, list[T]] = {name: [] for name in roots}
    for r in range(rounds):
        for name, root in roots.items():
            results[name].append(measure(root))
        print(f"round {r + 1}/{rounds} done", file=sys.stderr)
    return results


def call_in(root: Path, module: str, call: str) -> Any:
    """``module.call`` (a benchmark of this checkout's ``benchmarks/``, returning JSON-able figures) in a
    fresh process with ``root``'s tree first on ``sys.path``: it measures ``root``'s code."""
    paths = [str(root), str(ROOT / "benchmarks")]
    code = f"import sys, json; sys.path[:0] = {paths!r}; import {module}; print(json.dumps({module}.{call}))"
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.splitlines()[-1])
