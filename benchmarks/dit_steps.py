"""Training steps per second of the transformer, its batches built in the step's process and ahead in
worker processes, as a ratio in one run.

    .venv/bin/python benchmarks/dit_steps.py [--device cuda] [--batch 48] [--workers 4] [--steps 60]

On the scene's shards that ``scripts/train-scene`` (or ``dit_data --scene``) writes under checkpoints/,
with today's world's shards beside them where they are; the transformer as ``dit_train --scene`` trains it
(the shipped weights grown to read the scene), one ``dit_train.train_step`` per batch. The two ways take
turns, ``--steps`` each in blocks of 10, so a change in the machine's load falls on both alike; the
first block of each is a warm-up and not counted. Reported: the median and p90 of a step's time (the step
waits for the device before the clock is read), and steps per second.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from streaming_model.dit import grown_for_scene
from streaming_model.loading import load_dit
from streaming_model.train.batch_stream import batch_stream
from streaming_model.train.dit_batches import Batcher, Shards
from streaming_model.train.dit_data import DATA_DIR, SCENE_DATA_DIR
from streaming_model.train.dit_train import on, train_step

BLOCK = 10


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--workers", type=int, default=2, help="loader workers of the second way")
    ap.add_argument("--steps", type=int, default=40, help="counted steps per way")
    ap.add_argument("--threads", type=int, default=1, help="torch threads of the step's process")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if not (SCENE_DATA_DIR / "shard_0001.npz").exists():
        sys.exit(f"no scene shards in {SCENE_DATA_DIR}: build some first (dit_data --scene --shards 2)")
    dev = torch.device(args.device)
    plain = DATA_DIR if (DATA_DIR / "shard_0001.npz").exists() else None
    shards = Shards(SCENE_DATA_DIR, plain=plain)
    model = grown_for_scene(load_dit()[0]).to(dev)
    ema = copy.deepcopy(model).requires_grad_(False)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    batcher = Batcher(model.cfg, shards.train, shards.reference, ("turn",), 0.35, 0.25)
    mask = batcher.mask.to(dev)
    ways = {
        "built here": batch_stream(batcher, 1, args.batch, 0),
        f"{args.workers} loader workers": batch_stream(
            batcher, 1, args.batch, args.workers, dev.type == "cuda"
        ),
    }
    times: dict[str, list[float]] = {name: [] for name in ways}
    step = 0
    blocks = args.steps // BLOCK + 1
    for block in range(blocks):
        for name, stream in ways.items():
            for _ in range(BLOCK):
                # A step as the training loop waits for it: taking its batch (built now, or already built
                # ahead by a worker) and moving it to the device included.
                t0 = time.perf_counter()
                train_step(model, ema, opt, on(next(stream), dev), mask, step)
                if dev.type == "cuda":
                    torch.cuda.synchronize(dev)
                if block:
                    times[name].append(time.perf_counter() - t0)
                step += 1
        print(f"block {block + 1}/{blocks}", file=sys.stderr, flush=True)
    print(f"### Transformer training steps ({args.device}, batch {args.batch}, {args.steps} steps a way)\n")
    print("| batches | step median ms | p90 ms | steps/s |\n|---|---:|---:|---:|")
    for name, ts in times.items():
        a = np.array(ts) * 1000
        print(f"| {name} | {np.median(a):.0f} | {np.percentile(a, 90):.0f} | {1000 / a.mean():.2f} |")
    first, second = (np.array(ts).mean() for ts in times.values())
    print(f"\nsteps/s with workers over built here: {first / second:.2f}x")


if __name__ == "__main__":
    main()
