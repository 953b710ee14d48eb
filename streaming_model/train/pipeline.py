"""Run the whole training pipeline in order, resuming whatever stage was interrupted.

    nohup nice -n 19 python -m streaming_model.train.pipeline > checkpoints/pipeline.log 2>&1 &

Stages: (1) codec until --codec-psnr dB or --codec-minutes of training in all; (2) encode latent shards
for the transformer (the encoder is frozen from here on); (3) teach the decoder to draw the mouth from the
voice, --voice-minutes, decoder only (keeps the transformer's latents valid); (4) the transformer for
--dit-minutes per run.
Each stage resumes from its own checkpoint, so killing and restarting this script loses at most a few
minutes of work.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import torch

from ..loading import CODEC_PATH, load_codec
from .dit_data import DATA_DIR

CODEC_DONE = Path("checkpoints/codec/DONE")


def stage(module: str, *args: str) -> None:
    """Run one training module as a child (same interpreter, same nice level); stop on failure."""
    cmd = [sys.executable, "-m", f"streaming_model.train.{module}", *args]
    print("$", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE"})


def codec_minutes_so_far() -> float:
    """Training minutes already in the codec checkpoint."""
    path = Path("checkpoints/codec/ckpt.pt")
    if not path.exists():
        return 0.0
    return torch.load(path, map_location="cpu", weights_only=False)["elapsed"] / 60.0


def main() -> None:
    """Run the stages that are not done yet."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--codec-psnr", type=float, default=33.0)
    ap.add_argument("--codec-minutes", type=float, default=45.0)
    ap.add_argument(
        "--shards", type=int, default=5, help="shard 0 validates; each is 50 episodes x 48 chunks"
    )
    ap.add_argument("--voice-minutes", type=float, default=12.0, help="decoder training to read the voice")
    ap.add_argument("--dit-minutes", type=float, default=600.0)
    ap.add_argument("--dit-lr-end", type=float, help="anneal the transformer's learning rate to this")
    ap.add_argument("--rollout-after", type=int, default=1500, help="transformer step to start own-rollouts")
    # Two threads with OMP_WAIT_POLICY=PASSIVE: fast when the machine is idle, no spin-wait collapse
    # when other work holds a core.
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    threads = ["--threads", str(args.threads)]
    if not CODEC_DONE.exists() and CODEC_PATH.exists() and codec_minutes_so_far() == 0.0:
        # A machine without checkpoints: the shipped codec is the frozen encoder the shipped transformer
        # was trained with, so its latents are kept (retraining it would invalidate the transformer).
        CODEC_DONE.parent.mkdir(parents=True, exist_ok=True)
        CODEC_DONE.write_text("encoder frozen: the shipped codec\n")
    if not CODEC_DONE.exists():
        left = args.codec_minutes - codec_minutes_so_far()
        if left > 0:
            stage("codec_train", "--minutes", f"{left:.1f}", "--until-psnr", str(args.codec_psnr), *threads)
        CODEC_DONE.write_text("encoder frozen: latent shards depend on it\n")
    stage("dit_data", "--shards", str(args.shards), *threads)
    print(f"{len(list(DATA_DIR.glob('shard_*.npz')))} shards ready", flush=True)
    if load_codec().cfg.voice_taps == 0:  # exports a codec whose decoder reads the voice
        stage(
            "codec_train",
            "--voice-taps",
            "3",
            "--face-weight",
            "8",
            "--minutes",
            str(args.voice_minutes),
            *threads,
        )
    anneal = ["--lr-end", str(args.dit_lr_end)] if args.dit_lr_end is not None else []
    stage(
        "dit_train",
        "--minutes",
        str(args.dit_minutes),
        "--rollout-after",
        str(args.rollout_after),
        *anneal,
        *threads,
    )


if __name__ == "__main__":
    main()
