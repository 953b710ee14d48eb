"""Does a session opening, prefilling and rewinding beside a running one stall it?

    .venv/bin/python benchmarks/neighbour.py               # 20 trials
    .venv/bin/python benchmarks/neighbour.py --trials 5

A real ``onstage serve`` (benchmarks/served.py). Session A streams throughout and only watches. Each trial
has two windows: a quiet one, and one in which session B connects, starts the ``garden_gate`` story (a
model session opened and prefilled), waits for its first checkpoint, rewinds to it (a snapshot restored)
and leaves. Reported over the trials: A's largest gap between two video frames' arrivals in each kind of
window (median, p95, max), and their ratio, from the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import time

import numpy as np
from served import served, session_url

from server.client import SessionClient, VideoFrame
from server.media import MediaClock

WARMUP_S = 2.0
CHUNK_WAIT_S = 60.0


def largest_gap_ms(frames: list[VideoFrame], began: float, ended: float) -> float:
    """A's largest gap between consecutive frame arrivals in [began, ended] (the window's edges count)."""
    times = [began, *(f.t for f in frames if began <= f.t <= ended), ended]
    return float(np.diff(times).max() * 1000.0)


async def neighbour(url: str, seed: int) -> None:
    """Session B: open a story, rewind to its first checkpoint once frames follow it, leave."""
    async with SessionClient(url) as b:
        await b.start(story="garden_gate", director="script", seed=seed, timeout=CHUNK_WAIT_S)
        state = await b.wait_type("story.state", CHUNK_WAIT_S)
        await b.wait_frame(lambda f: True, CHUNK_WAIT_S)
        media = b.received.video[-1].header["chunk"]
        await b.send({"type": "story.rewind", "checkpoint": state["checkpoint"], "ref": "rw"})
        await b.wait_type("input.accepted", CHUNK_WAIT_S, ref="rw")
        await b.wait_frame(lambda f: f.header["chunk"] > media + 1, CHUNK_WAIT_S)


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trials", type=int, default=20)
    args = parser.parse_args()
    quiet: list[float] = []
    busy: list[float] = []
    async with served('[server.limits]\nadmission = "ceiling"\nresume_grace_s = 0.5\n') as base:
        url = session_url(base)
        async with SessionClient(url) as a:
            started = await a.start(seed=1)
            clock = MediaClock(started["fps"], started["chunk_frames"])
            await a.wait_frame(lambda f: f.header["chunk"] >= round(WARMUP_S / clock.chunk_s), CHUNK_WAIT_S)
            for trial in range(args.trials):
                began = time.monotonic()
                await neighbour(url, seed=100 + trial)
                ended = time.monotonic()
                busy.append(largest_gap_ms(a.received.video, began, ended))
                await asyncio.sleep(1.0)  # B's session ends (its grace passes) before the quiet window
                calm = time.monotonic()
                await asyncio.sleep(ended - began)
                quiet.append(largest_gap_ms(a.received.video, calm, time.monotonic()))
                print(f"trial {trial + 1}: largest gap {busy[-1]:.0f} ms beside B, {quiet[-1]:.0f} ms quiet")
    print(
        f"\n## Session A's largest frame gap while session B opens, prefills and rewinds ({args.trials} trials)\n"
    )
    print("| window | median ms | p95 ms | max ms |")
    print("|---|---:|---:|---:|")
    for name, gaps in (("B opens, prefills, rewinds", busy), ("quiet, same length", quiet)):
        g = np.array(gaps)
        print(f"| {name} | {np.median(g):.0f} | {np.percentile(g, 95):.0f} | {g.max():.0f} |")
    print(f"\nRatio of medians, beside B / quiet: {np.median(busy) / np.median(quiet):.2f}")


if __name__ == "__main__":
    asyncio.run(main())
