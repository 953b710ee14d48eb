"""Benchmark the probes (``streaming_model.probes``, ``streaming_model.scene_probes``): how long they take
to read frames, per frame, on rendered truth in today's world and in a changing scene.

    python benchmarks/probes.py                  # 6 episodes of 48 chunks (192 frames) in each world
    python benchmarks/probes.py --episodes 12 --rounds 3

The probes are the eyes of every quality figure: ``onstage eval`` reads each seed's ~600 frames with them,
and the quality tests read thousands. Episodes are rendered first (not timed); then each round reads
every episode with ``measure`` (which measures the scene too), ``measure_scene`` alone and ``identify``,
and the figures are the per-frame times of each episode read, median and 90th percentile over all of
them. Prints a markdown table for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np

# The checkout's own packages (not an editable install's).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from streaming_model.probes import identify, measure
from streaming_model.scene_probes import measure_scene
from streaming_model.world.episodes import Episode, random_episode

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


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--episodes", type=int, default=6, help="episodes per world (default 6)")
    parser.add_argument("--rounds", type=int, default=2, help="reads of every episode (default 2)")
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # the probes' NaN means on frames without a character
    worlds = {
        name: random_episode(args.seed, args.episodes, CHUNKS, scene=scene)
        for name, scene in (("today", False), ("scene", True))
    }
    reads: dict[str, Callable[[np.ndarray, int], object]] = {
        "measure": measure,
        "measure_scene": lambda frames, _: measure_scene(frames),
        "identify": lambda frames, _: identify(frames),
    }
    print(
        f"## The probes: ms per frame ({args.episodes} episodes of {CHUNKS} chunks a world, "
        f"{args.rounds} rounds; seed {args.seed})\n"
    )
    print("| world | probe | p50 | p90 |")
    print("|---|---|---:|---:|")
    for world, episodes in worlds.items():
        for name, read in reads.items():
            times = [t for _ in range(args.rounds) for t in read_all(episodes, read)]
            p90 = statistics.quantiles(times, n=10)[-1] if len(times) > 1 else times[0]
            print(f"| {world} | {name} | {statistics.median(times):.2f} | {p90:.2f} |")


if __name__ == "__main__":
    main()
