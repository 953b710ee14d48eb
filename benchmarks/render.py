"""Benchmark the world's renderer (``streaming_model.world``): how long an episode takes to simulate and
draw, per world-frame, in today's world and in a changing scene, one world at a time (as the world backend
draws a live session) and twelve at once (as the tests and the training data draw them).

    python benchmarks/render.py                          # 5 rounds of this checkout
    python benchmarks/render.py --against /tmp/old-clone  # and of another checkout's, in turns: a ratio

Each round renders, in a fresh process with its checkout's tree first on ``sys.path``, one episode of
CHUNKS chunks in each world at each batch size; with ``--against`` the two checkouts take turns round by
round (this, other, this, ...), so that a change in the machine's load falls on both. The figures are the
median and the worst round's milliseconds per world-frame. Prints a markdown table for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from turns import call_in, checkouts, in_turns

CHUNKS = 24
"""Chunks per episode (96 frames of the world's 4-frame chunks: 4 s at 24 fps)."""
CASES = [(world, n) for world in ("today", "scene") for n in (1, 12)]
"""(world, worlds drawn at once) of every round."""


def one_round(seed: int) -> dict[str, float]:
    """Milliseconds per world-frame of each case, rendered by the checkout first on ``sys.path``."""
    from streaming_model.world.episodes import random_episode

    random_episode(seed, 1, 1, scene=True)  # imports and first-call costs, not timed
    times = {}
    for world, n in CASES:
        start = time.perf_counter()
        ep = random_episode(seed, n, CHUNKS, scene=world == "scene")
        times[f"{world} x{n}"] = (time.perf_counter() - start) * 1000.0 / ep.frames[:, :, 0, 0, 0].size
    return times


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5, help="rounds of each checkout (default 5)")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--against", type=Path, help="another checkout, rendering in turns with this one")
    args = parser.parse_args()
    rounds: dict[str, list[dict[str, float]]] = in_turns(
        checkouts(args.against), args.rounds, lambda root: call_in(root, "render", f"one_round({args.seed})")
    )
    header = "| case | this: ms per world-frame, median (worst) |"
    if args.against:
        header += " other | this / other |"
    print(header)
    print("|---|---|" + ("---|---|" if args.against else ""))
    for case in rounds["this"][0]:
        this = [r[case] for r in rounds["this"]]
        row = f"| {case} | {statistics.median(this):.2f} ({max(this):.2f}) |"
        if args.against:
            other = [r[case] for r in rounds["other"]]
            row += f" {statistics.median(other):.2f} ({max(other):.2f}) |"
            row += f" {statistics.median(this) / statistics.median(other):.2f} |"
        print(row)


if __name__ == "__main__":
    main()
