"""Story checkpoint costs: blob sizes, encode and decode times, and a save and a load through SQLite.

    .venv/bin/python benchmarks/checkpoints.py [--repeat 50]

A shipped-model session 12 chunks in (ring full, past a wrap) and a realizer with a story beat's blocks
running give the snapshots. Encode/decode run on the calling thread here; the store runs them, with
SQLite, on a worker thread, so none of this is spent on the event loop. Also shown: the runtime's own
``snapshot()`` and ``restore()``, which the conductor calls between chunks. Prints a markdown table of
medians and 95th percentiles in milliseconds.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from agent.realizer import Realizer
from agent.story.blobs import decode_generator, decode_realizer, encode_generator, encode_realizer
from agent.story.format import load_story
from agent.story.player import StoryPlayer
from agent.story.store import CheckpointStore
from streaming_model.condition import ChunkCondition
from streaming_model.runtime import Generator


def timed(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    """Median and p95 of ``fn``'s wall time, in ms."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return float(np.median(times)), float(np.percentile(times, 95))


async def store_times(player: StoryPlayer, store: CheckpointStore, repeat: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"save": [], "load": []}
    for _ in range(repeat):
        start = time.perf_counter()
        await player.checkpoint(player.capture() if player.capture is not None else None)
        times["save"].append((time.perf_counter() - start) * 1000)
        start = time.perf_counter()
        await store.checkpoint(player.session, player.current)
        times["load"].append((time.perf_counter() - start) * 1000)
    return times


async def main(repeat: int) -> None:
    torch.set_num_threads(1)
    session = Generator.load().open_session(identity=0, seed=1)
    for k in range(12):
        pending = session.generate(ChunkCondition(action="wave" if k % 4 else "nod"))
        assert pending is not None
        session.commit(pending, decode=False)
    realizer = Realizer(session="bench")
    with tempfile.TemporaryDirectory() as tmp:
        store = await CheckpointStore.open(Path(tmp) / "stories.db")
        player = await StoryPlayer.begin(
            load_story("garden_gate"), realizer, session="bench", store=store, capture=session.snapshot
        )
        for k in range(6):
            realizer.tick(k)
        snapshot, realizer_snapshot = session.snapshot(), realizer.snapshot()
        generator_blob, realizer_blob = encode_generator(snapshot), encode_realizer(realizer_snapshot)
        rows = [
            ("generator blob encode", len(generator_blob), timed(lambda: encode_generator(snapshot), repeat)),
            (
                "generator blob decode",
                len(generator_blob),
                timed(lambda: decode_generator(generator_blob), repeat),
            ),
            (
                "realizer blob encode",
                len(realizer_blob),
                timed(lambda: encode_realizer(realizer_snapshot), repeat),
            ),
            (
                "realizer blob decode",
                len(realizer_blob),
                timed(lambda: decode_realizer(realizer_blob), repeat),
            ),
            ("runtime snapshot()", None, timed(session.snapshot, repeat)),
            ("runtime restore()", None, timed(lambda: session.restore(snapshot), repeat)),
        ]
        through = await store_times(player, store, repeat)
        await store.close()
    for name in ("save", "load"):
        ms = through[name]
        rows.append(
            (f"store {name} (await, SQLite WAL)", None, (float(np.median(ms)), float(np.percentile(ms, 95))))
        )
    print(f"| step ({repeat} runs) | bytes | p50 ms | p95 ms |")
    print("|---|---:|---:|---:|")
    for name, size, (p50, p95) in rows:
        print(f"| {name} | {'' if size is None else f'{size:,}'} | {p50:.2f} | {p95:.2f} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=50)
    asyncio.run(main(parser.parse_args().repeat))
