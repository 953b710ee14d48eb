"""Benchmark the streaming generator: per-chunk time and cache maintenance, write-time vs naive.

    python benchmarks/generator.py                 # 300 chunks per path, 1 thread
    python benchmarks/generator.py --chunks 3600   # a 10-minute session (memory checked along the way);
                                                   # the naive path runs --naive-chunks (default 300)

Per chunk = generate (all denoise steps) + commit (the cache write pass) + decode to pixels.
Cache maintenance = time spent rotating/quantizing/assembling cached keys and values.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from pathlib import Path

import numpy as np
import torch

from streaming_model.condition import ChunkCondition
from streaming_model.kv_cache import CacheMode
from streaming_model.loading import CODEC_PATH, DIT_PATH
from streaming_model.manifest import ACTION_NAMES, build_manifest
from streaming_model.runtime import Generator, Session

BUDGET_MS = 1000.0 * build_manifest().chunk_s  # the tiny model's chunk: 166.7 ms


def rss_mb() -> float:
    """Resident memory of this process in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return float("nan")


def script(n: int) -> list[ChunkCondition]:
    """A cycling sequence of actions, 6 chunks each, talking half of the time."""
    rng = np.random.default_rng(0)
    out = []
    for i in range(n):
        action = ACTION_NAMES[(i // 6) % len(ACTION_NAMES)]
        talking = (i // 12) % 2 == 0
        out.append(
            ChunkCondition(
                action=action,
                target=(0.5, -0.2),
                speaking=talking,
                audio=tuple(float(a) for a in rng.uniform(0, 1, 4)),
            )
        )
    return out


def run(session: Session, conds: list[ChunkCondition]) -> dict[str, float]:
    """Step through conds; per-chunk times and maintenance."""
    times, rss = [], []
    for i, c in enumerate(conds):
        t0 = time.perf_counter()
        session.step(c)
        times.append(1000.0 * (time.perf_counter() - t0))
        if i % 100 == 0:
            rss.append(rss_mb())
    rss.append(rss_mb())
    warm = times[5:]  # the first chunks pay one-time allocation costs
    return {
        "median_ms": statistics.median(warm),
        "p99_ms": float(np.percentile(warm, 99)),
        "max_ms": max(warm),
        "late_share": float(np.mean(np.array(warm) > BUDGET_MS)),
        "maint_ms": 1000.0 * session.cache.maintenance_s / len(conds),
        "rss_start_mb": rss[1] if len(rss) > 2 else rss[0],
        "rss_end_mb": rss[-1],
    }


def interrupt_latency(session: Session, trials: int) -> dict[str, float]:
    """Set the cancel flag at a random moment inside generate(); time until generate() returns."""
    rng = np.random.default_rng(1)
    cond = ChunkCondition(action="wave")
    t0 = time.perf_counter()
    for _ in range(5):
        session.generate(cond)
    gen_s = (time.perf_counter() - t0) / 5
    lat = []
    for _ in range(trials):
        cancel = threading.Event()
        stamp: list[float] = []

        def interrupt(c: threading.Event = cancel, st: list[float] = stamp) -> None:
            st.append(time.perf_counter())
            c.set()

        timer = threading.Timer(rng.uniform(0.05, 0.9) * gen_s, interrupt)
        timer.start()
        out = session.generate(cond, cancel=cancel)
        done = time.perf_counter()
        timer.join()
        if out is None:
            lat.append(1000.0 * (done - stamp[0]))
    steps = len(session.levels)
    return {
        "step_ms": 1000.0 * gen_s / steps,
        "median_ms": statistics.median(lat),
        "max_ms": max(lat),
        "n": len(lat),
    }


def main() -> None:
    """Run both cache paths on the same script and print a table."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--chunks", type=int, default=300)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--naive-chunks", type=int, default=300)
    ap.add_argument("--dit", type=Path, default=DIT_PATH)
    ap.add_argument("--codec", type=Path, default=CODEC_PATH)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    gen = Generator.load(args.dit, args.codec)
    results = {}
    modes: tuple[tuple[CacheMode, int], ...] = (
        ("write_time", args.chunks),
        ("naive", min(args.chunks, args.naive_chunks)),
    )
    for mode, n in modes:
        session = gen.open_session(identity=1, seed=0, steps=args.steps, cache_mode=mode)
        results[mode] = run(session, script(n))
        results[mode]["chunks"] = n
    w, naive = results["write_time"], results["naive"]
    print(f"{args.steps} denoise steps, {args.threads} thread(s), budget {BUDGET_MS:.1f} ms per chunk")
    print(
        f"{'path':<11} {'chunks':>6} {'median ms':>10} {'p99 ms':>8} {'max ms':>8} {'late %':>7} "
        f"{'maint ms':>9} {'maint %':>8} {'RSS MiB':>15}"
    )
    for mode, r in results.items():
        print(
            f"{mode:<11} {r['chunks']:>6} {r['median_ms']:>10.1f} {r['p99_ms']:>8.1f} {r['max_ms']:>8.1f} "
            f"{100 * r['late_share']:>7.2f} {r['maint_ms']:>9.3f} {100 * r['maint_ms'] / r['median_ms']:>8.2f} "
            f"{r['rss_start_mb']:>7.0f}->{r['rss_end_mb']:<7.0f}"
        )
    print(f"maintenance naive / write-time: {naive['maint_ms'] / max(w['maint_ms'], 1e-9):.1f}x")
    lat = interrupt_latency(gen.open_session(identity=1, seed=0, steps=args.steps), 40)
    print(
        f"interrupt: {lat['n']} cancelled mid-chunk, cancel->return median {lat['median_ms']:.1f} ms, "
        f"max {lat['max_ms']:.1f} ms (one denoise step = {lat['step_ms']:.1f} ms)"
    )


if __name__ == "__main__":
    main()
