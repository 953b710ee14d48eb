"""Does batching sessions pay on this machine? B sessions' chunks one by one against one batched pass.

    python benchmarks/batching.py                     # B = 1..8, 60 rounds each, the default denoise steps
    python benchmarks/batching.py --steps 2 --sizes 1 2 4 8 --rounds 100
    python benchmarks/batching.py --linears int8      # int8 linears (not bit-exact when batched)

For each batch size B, two sets of B sessions (the same identities and seeds) step through the same
conditions: one set chunk by chunk as a lone session does (generate, commit, decode, one session after
the other), the other as one batch (``runtime.generate_many``, ``commit_many``, ``decode_many``). The
two paths take turns round by round, so a change in the machine's load falls on both alike; the ratio
batched / one by one compares like with like. Every round's frames are compared byte for byte: the
"identical" column says whether a session's frames were the same batched as alone in every round.
One thread (as a lane runs), the first 5 rounds left out of the times.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's packages first

from generator import BUDGET_MS, script

from streaming_model.condition import ChunkCondition
from streaming_model.linears import check_linears
from streaming_model.passes import commit_many, decode_many, generate_many
from streaming_model.precision import compute_dtype
from streaming_model.runtime import Generator, Session
from streaming_model.sampler import STEPS

WARM_ROUNDS = 5


def one_by_one(sessions: list[Session], conds: list[ChunkCondition]) -> tuple[list[np.ndarray], list[float]]:
    """Each session's chunk alone, as today; the frames and the stage times (generate, commit, decode)."""
    frames, stages = [], [0.0, 0.0, 0.0]
    for session, cond in zip(sessions, conds, strict=True):
        t0 = time.perf_counter()
        pending = session.generate(cond)
        t1 = time.perf_counter()
        assert pending is not None
        session.commit(pending, decode=False)
        t2 = time.perf_counter()
        frames.append(session.decode(pending))
        t3 = time.perf_counter()
        for i, d in enumerate((t1 - t0, t2 - t1, t3 - t2)):
            stages[i] += d
    return frames, stages


def batched(sessions: list[Session], conds: list[ChunkCondition]) -> tuple[list[np.ndarray], list[float]]:
    """The sessions' chunks as one batch; the frames and the stage times."""
    t0 = time.perf_counter()
    pendings = [p for p in generate_many(sessions, conds, [None] * len(sessions)) if p is not None]
    t1 = time.perf_counter()
    commit_many(sessions, pendings)
    t2 = time.perf_counter()
    frames = decode_many(sessions[0].codec, pendings)
    t3 = time.perf_counter()
    return frames, [t1 - t0, t2 - t1, t3 - t2]


def main() -> None:
    """Every batch size in turn; a markdown table."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=list(range(1, 9)))
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--steps", type=int, default=STEPS)
    ap.add_argument("--linears", default="float")
    args = ap.parse_args()
    torch.set_num_threads(1)
    gen = Generator.load()
    linears = check_linears(args.linears)
    conds = script(args.rounds * max(args.sizes) + max(args.sizes))
    load = os.getloadavg()[0]
    print(
        f"{args.steps} denoise steps, linears {linears}, computing in {compute_dtype()}, 1 thread, "
        f"{args.rounds} rounds per size (the first {WARM_ROUNDS} not timed), load {load:.2f} at the start\n"
    )
    print(
        "| B | one by one p50 ms | p99 ms | batched p50 ms | p99 ms | x p50 | x p99 | batched ms per session "
        "| generate / commit / decode ms (batched) | identical |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
    for size in args.sizes:

        def sessions(n: int = size) -> list[Session]:
            return [
                gen.open_session(identity=i % 4, seed=i, steps=args.steps, linears=linears) for i in range(n)
            ]

        alone, together = sessions(), sessions()
        times: dict[str, list[float]] = {"alone": [], "batched": []}
        stages: list[list[float]] = []
        identical = True
        for r in range(args.rounds):
            # Each session its own condition: the script shifted per session.
            round_conds = [conds[(r * size + 7 * i) % len(conds)] for i in range(size)]
            t0 = time.perf_counter()
            lone_frames, _ = one_by_one(alone, round_conds)
            t1 = time.perf_counter()
            batch_frames, stage = batched(together, round_conds)
            t2 = time.perf_counter()
            identical = identical and all(
                np.array_equal(a, b) for a, b in zip(lone_frames, batch_frames, strict=True)
            )
            if r >= WARM_ROUNDS:
                times["alone"].append(1000.0 * (t1 - t0))
                times["batched"].append(1000.0 * (t2 - t1))
                stages.append([1000.0 * s for s in stage])
        a50, b50 = statistics.median(times["alone"]), statistics.median(times["batched"])
        a99, b99 = float(np.percentile(times["alone"], 99)), float(np.percentile(times["batched"], 99))
        g, c, d = (statistics.median(s[i] for s in stages) for i in range(3))
        print(
            f"| {size} | {a50:.1f} | {a99:.1f} | {b50:.1f} | {b99:.1f} | {b50 / a50:.3f} | {b99 / a99:.3f} "
            f"| {b50 / size:.1f} | {g:.1f} / {c:.1f} / {d:.1f} | {'yes' if identical else 'NO'} |"
        )
    print(f"\nA session's chunk is due every {BUDGET_MS:.1f} ms; load {os.getloadavg()[0]:.2f} at the end.")


if __name__ == "__main__":
    main()
