"""Benchmark the probes (``streaming_model.probes``, ``streaming_model.scene_probes``): how long they take
to read frames, per frame, on rendered truth in today's world and in a changing scene.

    python benchmarks/probes.py                  # 6 episodes of 48 chunks (192 frames) in each world
    python benchmarks/probes.py --episodes 12 --rounds 3
    python benchmarks/probes.py --against /tmp/old-clone   # and another checkout's, in turns: a ratio

The probes are the eyes of every quality figure: ``onstage eval`` reads each seed's ~600 frames with them,
and the quality tests read thousands. Episodes are rendered first (not timed); then each round reads
every episode with ``measure`` (which measures the scene too), ``measure_scene`` alone and ``identify``,
and the figures are the per-frame times of each episode read, median and 90th percentile over all of
them. Each round runs in a fresh process with its checkout's tree first on ``sys.path``; with ``--against``
the two checkouts take turns round by round. Prints a markdown table for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from turns import call_in, checkouts, in_turns

if TYPE_CHECKING:
    from streaming_model.world.episodes import Episode

CHUNKS = 48
"""Chunks per episode (192 frames of the world's 4-frame chunks: 8 s at 24 fps)."""


def read_all(episodes: Episode, read: Callable[[np.ndarray, int], object]) -> list[float]:
    """Per-frame milliseconds of ``read`` on each episode (its frames and its character's identity)."""
    times = []
    for frames, identity in zip(episodes.frames, episodes.identity, strict=True):
        start = time.perf_counter()
        read(frames, int(identity))
        times.append((time.perf_counter() - start) * 1000.0 / len(frames))
    return times


def one_round(seed: int, episodes: int) -> dict[str, list[float]]:
    """Per-frame milliseconds of every episode read by each probe, keyed "world probe", by the checkout
    first on ``sys.path`` (the episodes are rendered first, not timed)."""
    from streaming_model.probes import identify, measure
    from streaming_model.scene_probes import measure_scene
    from streaming_model.world.episodes import random_episode

    warnings.simplefilter("ignore")  # the probes' NaN means on frames without a character
    reads: dict[str, Callable[[np.ndarray, int], object]] = {
        "measure": measure,
        "measure_scene": lambda frames, _: measure_scene(frames),
        "identify": lambda frames, _: identify(frames),
    }
    out = {}
    for world, scene in (("today", False), ("scene", True)):
        ep = random_episode(seed, episodes, CHUNKS, scene=scene)
        for name, read in reads.items():
            out[f"{world} {name}"] = read_all(ep, read)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--episodes", type=int, default=6, help="episodes per world (default 6)")
    parser.add_argument("--rounds", type=int, default=2, help="reads of every episode (default 2)")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--against", type=Path, help="another checkout, reading in turns with this one")
    args = parser.parse_args()
    call = f"one_round({args.seed}, {args.episodes})"
    rounds = in_turns(checkouts(args.against), args.rounds, lambda root: call_in(root, "probes", call))
    print(
        f"## The probes: ms per frame ({args.episodes} episodes of {CHUNKS} chunks a world, "
        f"{args.rounds} rounds; seed {args.seed})\n"
    )
    print(
        "| world | probe | p50 | p90 |"
        + (" other p50 | other p90 | p50 this / other |" if args.against else "")
    )
    print("|---|---|---:|---:|" + ("---:|---:|---:|" if args.against else ""))
    for key in rounds["this"][0]:
        row = "| " + " | ".join(key.split()) + " |"
        medians = []
        for name in rounds:
            times = [t for r in rounds[name] for t in r[key]]
            p90 = statistics.quantiles(times, n=10)[-1] if len(times) > 1 else times[0]
            medians.append(statistics.median(times))
            row += f" {medians[-1]:.2f} | {p90:.2f} |"
        if args.against:
            row += f" {medians[0] / medians[1]:.2f} |"
        print(row)


if __name__ == "__main__":
    main()
