"""Two denoise steps a chunk (today's path) against fewer, in one run: per-chunk time of generate +
commit + decode, the two sessions' chunks alternating so that both see the same machine.

    .venv/bin/python benchmarks/steps.py                    # 2 steps vs 1, 300 chunks each, 1 thread
    .venv/bin/python benchmarks/steps.py --candidate 1 --chunks 600

Whether the candidate keeps the picture is not measured here: `onstage eval --baseline steps=2
--candidate steps=1 --seeds 20` is (docs/eval.md).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from generator import BUDGET_MS, script

from streaming_model.runtime import Generator


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", type=int, default=2, help="denoise steps of today's path")
    ap.add_argument("--candidate", type=int, default=1, help="denoise steps of the path tried")
    ap.add_argument("--chunks", type=int, default=300)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    gen = Generator.load()
    sessions = {
        steps: gen.open_session(identity=1, seed=0, steps=steps) for steps in (args.baseline, args.candidate)
    }
    times: dict[int, list[float]] = {steps: [] for steps in sessions}
    for cond in script(args.chunks):
        for steps, session in sessions.items():
            t0 = time.perf_counter()
            session.step(cond)
            times[steps].append(1000.0 * (time.perf_counter() - t0))
    print(
        f"{args.chunks} chunks each, alternating, {args.threads} thread(s), budget {BUDGET_MS:.1f} ms a chunk\n"
    )
    print("| denoise steps | median ms | p99 ms | max ms | late % |")
    print("|---|---:|---:|---:|---:|")
    warm = {steps: np.asarray(t[5:]) for steps, t in times.items()}  # the first chunks pay allocations
    for steps, t in warm.items():
        late = 100 * float(np.mean(t > BUDGET_MS))
        print(f"| {steps} | {np.median(t):.1f} | {np.percentile(t, 99):.1f} | {t.max():.1f} | {late:.2f} |")
    base, cand = warm[args.baseline], warm[args.candidate]
    print(
        f"\n{args.candidate} step(s) / {args.baseline}: median {np.median(cand) / np.median(base):.3f}, "
        f"p99 {np.percentile(cand, 99) / np.percentile(base, 99):.3f}"
    )


if __name__ == "__main__":
    main()
