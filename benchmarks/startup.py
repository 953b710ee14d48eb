"""Benchmark how long ``onstage serve`` takes to start: from the process's start to its "serving on" line
(the page can be opened), split at its "loading the models" line (imports before it; the model's load and
warm-up, hearing and voice after it).

    python benchmarks/startup.py                          # 4 starts of this checkout's server
    python benchmarks/startup.py --against /tmp/old-clone  # and of another checkout's, in turns: a ratio

With ``--against``, the two checkouts' servers start in turns (this, other, this, ...), each with its own
tree on ``PYTHONPATH`` and this checkout's Python, so that a change in the machine's load falls on both.
Prints a markdown table for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from turns import checkouts, in_turns

TIMEOUT_S = 300.0


def start_once(root: Path) -> tuple[float, float]:
    """Seconds from spawning ``onstage serve`` (from ``root``'s tree) to its loading line and to its
    serving line; the server is stopped after (killed at ``TIMEOUT_S``, silent or not)."""
    began = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "server.cli", "serve", "--port", "0"],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    deadline = threading.Timer(TIMEOUT_S, process.kill)  # ends the read below: the pipe closes
    deadline.start()
    loading = serving = None
    try:
        for line in process.stderr:
            now = time.perf_counter() - began
            if "loading the models" in line:
                loading = now
            elif "serving on" in line:
                serving = now
                break
    finally:
        deadline.cancel()
        process.terminate()
        process.wait()
    if loading is None or serving is None:
        raise RuntimeError(f"the server at {root} did not start (exit {process.returncode})")
    return loading, serving


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=4, help="starts of each checkout (default 4)")
    parser.add_argument("--against", type=Path, help="another checkout, started in turns with this one")
    args = parser.parse_args()
    roots = checkouts(args.against)
    times = in_turns(roots, args.runs, start_once)
    print(f"## `onstage serve` to its serving line ({args.runs} starts each; seconds, median and max)\n")
    print("| checkout | imports | loading | in all | in all, max |")
    print("|---|---:|---:|---:|---:|")
    for name, root in roots.items():
        imports = statistics.median(t[0] for t in times[name])
        total = [t[1] for t in times[name]]
        loading = statistics.median(t[1] - t[0] for t in times[name])
        median = statistics.median(total)
        print(f"| {name} ({root}) | {imports:.1f} | {loading:.1f} | {median:.1f} | {max(total):.1f} |")
    if args.against:
        ratio = statistics.median(t[1] for t in times["this"]) / statistics.median(
            t[1] for t in times["other"]
        )
        print(f"\nThis checkout's start against the other's, medians: {ratio:.2f}x")


if __name__ == "__main__":
    main()
