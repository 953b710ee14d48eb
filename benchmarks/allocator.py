"""Benchmark the allocator setting (``streaming_model.allocator``): chunks with freed pages kept mapped
against glibc's allocator as shipped, as a ratio measured in one run.

    python benchmarks/allocator.py                  # 4 rounds of 2 processes, 150 chunks each
    python benchmarks/allocator.py --rounds 6 --chunks 300

The setting is per process, so each round starts one process per allocator, in turns (kept, glibc, kept,
...), so that a change in the machine's load falls on both. A process runs, as a served session's model
thread does (one torch thread, off the main thread), a session as served (``linears=auto``, one step,
commits fused, the slim codec) and today's path (two steps, commits apart, the full codec, float) on
``generator.py``'s script, chunk by chunk in turns, and reports each path's per-chunk times and the page
faults and CPU time of the whole process per chunk. glibc's allocator as shipped is what a process gets
when the environment sets a ``MALLOC_*`` variable (here ``MALLOC_PERTURB_=0``, which changes nothing else).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import msgspec
import numpy as np
import torch

# The checkout's own packages (not an editable install's).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from generator import Lane, script

from streaming_model.allocator import keep_freed_pages, set_by_environment
from streaming_model.loading import CODEC_PATH, DIT_PATH, SLIM_CODEC_PATH
from streaming_model.runtime import Generator

ALLOCATORS = {"kept": {}, "glibc": {"MALLOC_PERTURB_": "0"}}
"""Each allocator's environment, on top of this one's (which must not set the allocator itself)."""
WARM = 10
"""Chunks per path left out of the figures: they pay one-time allocation costs."""
PATHS = ("served", "today")


class ProcessReport(msgspec.Struct):
    """What one child process measured."""

    kept: bool  # whether it ran with freed pages kept
    times: dict[str, list[float]]  # per path, each chunk's generate + commit + decode (ms)
    faults_per_chunk: float  # the whole process's minor page faults per chunk of either path
    cpu_ms_per_chunk: float


def child(chunks: int) -> ProcessReport:
    """Run both paths in this process on a model thread; their times and the process's faults and CPU."""
    served = Generator.load(DIT_PATH, SLIM_CODEC_PATH)
    full = Generator.load(DIT_PATH, CODEC_PATH)
    sessions = (
        served.open_session(identity=1, seed=0, steps=1, linears="auto"),
        full.open_session(identity=1, seed=0, steps=2, linears="float", commit_pass="apart"),
    )
    lanes = [Lane(name, session, chunks) for name, session in zip(PATHS, sessions, strict=True)]
    usage: list[resource.struct_rusage] = []

    def run() -> None:
        for i, cond in enumerate(script(chunks)):
            if i == WARM:
                usage.append(resource.getrusage(resource.RUSAGE_SELF))
            for lane in lanes:
                lane.step(i, cond)
        usage.append(resource.getrusage(resource.RUSAGE_SELF))

    with ThreadPoolExecutor(1, initializer=torch.set_num_threads, initargs=(1,)) as pool:
        pool.submit(run).result()
    start, end = usage
    measured = (chunks - WARM) * len(lanes)
    return ProcessReport(
        kept=keep_freed_pages(),
        times={lane.name: lane.times[WARM:] for lane in lanes},
        faults_per_chunk=(end.ru_minflt - start.ru_minflt) / measured,
        cpu_ms_per_chunk=1000.0 * (end.ru_utime + end.ru_stime - start.ru_utime - start.ru_stime) / measured,
    )


def spawn(allocator: str, chunks: int) -> ProcessReport:
    """One child process with ``allocator``'s environment; its report."""
    env = {**os.environ, **ALLOCATORS[allocator]}
    out = subprocess.run(
        [sys.executable, __file__, "--child", "--chunks", str(chunks)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    report = msgspec.json.decode(out.stdout.splitlines()[-1], type=ProcessReport)
    if report.kept != (allocator == "kept"):
        raise SystemExit(f"the {allocator} process did not run that allocator (kept: {report.kept})")
    return report


def main() -> None:
    """Rounds of one process per allocator; per allocator and path the median and p99 over all rounds."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--chunks", type=int, default=150, help=f"chunks per path per process (> {WARM})")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.chunks <= WARM:
        ap.error(f"--chunks must be more than the {WARM} warm-up chunks left out")
    if args.child:
        print(msgspec.json.encode(child(args.chunks)).decode())
        return
    if set_by_environment():
        ap.error("this environment sets glibc's allocator itself (MALLOC_* or GLIBC_TUNABLES): unset it")
    reports: dict[str, list[ProcessReport]] = {name: [] for name in ALLOCATORS}
    t0 = time.perf_counter()
    for r in range(args.rounds):
        for name in ALLOCATORS:
            reports[name].append(spawn(name, args.chunks))
            print(
                f"round {r + 1}/{args.rounds}: {name} done ({time.perf_counter() - t0:.0f} s)",
                file=sys.stderr,
            )
    print(
        f"{args.rounds} rounds, {args.chunks} chunks per path per process, one torch thread off the main one"
    )
    print(
        f"{'allocator':<9} {'path':<7} {'median ms':>10} {'p99 ms':>8} {'faults/chunk':>13} "
        f"{'cpu ms/chunk':>13}"
    )
    medians: dict[tuple[str, str], float] = {}
    for name, rs in reports.items():
        faults = statistics.median(r.faults_per_chunk for r in rs)
        cpu = statistics.median(r.cpu_ms_per_chunk for r in rs)
        for path in PATHS:
            ts = [t for r in rs for t in r.times[path]]
            medians[name, path] = statistics.median(ts)
            print(
                f"{name:<9} {path:<7} {medians[name, path]:>10.1f} {np.percentile(ts, 99):>8.1f} "
                f"{faults:>13.0f} {cpu:>13.1f}"
            )
    for path in PATHS:
        print(f"{path}: kept / glibc median {medians['kept', path] / medians['glibc', path]:.3f}")
    for name in ALLOCATORS:
        print(f"{name}: served / today median {medians[name, 'served'] / medians[name, 'today']:.3f}")
    before = medians["kept", "served"] / medians["glibc", "today"]
    print(f"served, kept / today, glibc as shipped (today's path as it ran before) median {before:.3f}")


if __name__ == "__main__":
    main()
