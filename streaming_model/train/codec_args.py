"""The command line of ``codec_train``: what a run teaches (the face, the voice, the scene, a slimmer
decoder, a teacher), how long and how fast it trains, and which checkpoint folder it resumes from."""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from ..loading import CODEC_PATH, load_codec
from .common import add_device_args

CKPT_DIR = Path("checkpoints/codec")
VOICE_CKPT_DIR = Path("checkpoints/codec_voice")
SCENE_CKPT_DIR = Path("checkpoints/codec_scene")
ANCHORED_CKPT_DIR = Path("checkpoints/codec_scene_anchored")
SLIM_CKPT_DIR = Path("checkpoints/codec_slim")
TAUGHT_CKPT_DIR = Path("checkpoints/codec_slim_taught")


def _add_run_args(ap: argparse.ArgumentParser) -> None:
    """How long and how fast this run trains, how often it checkpoints and when it stops early."""
    ap.add_argument(
        "--minutes",
        type=float,
        default=30.0,
        help="this run's wall clock, filling the pool of worlds included",
    )
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ckpt-every-min", type=float, default=3.0)
    ap.add_argument("--until-psnr", type=float, default=99.0, help="stop early at this validation PSNR")


def _add_lesson_args(ap: argparse.ArgumentParser) -> None:
    """What the codec is taught: the face, the voice, the scene, and which parts of it learn."""
    ap.add_argument("--face-weight", type=float, default=0.0, help="extra loss weight on eyes and mouth")
    ap.add_argument(
        "--decoder-only",
        action="store_true",
        help="freeze the encoder (and latent scale) so latents already encoded for the transformer stay valid",
    )
    ap.add_argument(
        "--voice-taps",
        type=int,
        default=0,
        help="teach the decoder to read this many voice values per frame (implies --decoder-only)",
    )
    ap.add_argument(
        "--scene",
        action="store_true",
        help=f"teach the decoder the scene from worlds whose scene changes (implies --decoder-only; into {SCENE_CKPT_DIR})",
    )
    ap.add_argument(
        "--anchor",
        type=float,
        default=0.0,
        help=f"with --scene: train the encoder too, its latents of today's world pulled toward the shipped "
        f"encoder's with this weight (into {ANCHORED_CKPT_DIR})",
    )
    ap.add_argument(
        "--encoder",
        type=Path,
        default=CODEC_PATH,
        help="with --decoder-only or --scene: the codec whose encoder and latent scale are kept (and whose "
        "decoder is trained on), e.g. an anchored codec the transformer's latents were encoded with",
    )
    ap.add_argument(
        "--slim",
        action="store_true",
        help=f"a decoder without its per-frame residual block, from that codec's (implies --decoder-only; "
        f"into {SLIM_CKPT_DIR})",
    )
    ap.add_argument(
        "--lean",
        action="store_true",
        help="with --slim: without the residual block that mixes the frames at 16x16 either (a quarter of a "
        "slim decoder's time on a CPU)",
    )
    ap.add_argument(
        "--start",
        type=Path,
        default=None,
        help="with --slim: the codec whose decoder the new one starts from (default: --encoder's), e.g. "
        "the shipped slim codec for a --lean one",
    )
    ap.add_argument(
        "--teacher",
        action="store_true",
        help=f"with --slim: learn what that codec's decoder draws of the same latents, not the world's frames "
        f"(into {TAUGHT_CKPT_DIR})",
    )
    ap.add_argument(
        "--model-seeds",
        type=int,
        default=0,
        help="with --teacher: half of each batch from the transformer's own latents of this many scripted "
        "sessions (generated once, kept beside the checkpoint)",
    )
    ap.add_argument(
        "--turn-weight",
        type=float,
        default=1.0,
        help="with --model-seeds: draw the transformer's chunks made under a turn this many times as often "
        "as the others (the turn around is what a leaner decoder lost)",
    )


def parse_args() -> argparse.Namespace:
    """The command line, checked (``codec_train``'s docstring has the recipes)."""
    ap = argparse.ArgumentParser()
    _add_run_args(ap)
    _add_lesson_args(ap)
    add_device_args(ap)
    ap.add_argument(
        "--pool",
        type=int,
        default=8,
        help="renders of 16 worlds x 15 chunks held in memory to draw batches from",
    )
    ap.add_argument("--refresh-every", type=int, default=100, help="steps between pool refreshes")
    args = ap.parse_args()
    if args.teacher and not args.slim:
        ap.error("--teacher teaches a slim decoder: give --slim too")
    if (args.lean or args.start) and not args.slim:
        ap.error("--lean and --start shape and start a slim decoder: give --slim too")
    if args.model_seeds and not args.teacher:
        ap.error("--model-seeds needs --teacher (the transformer's latents have no true frames)")
    if args.model_seeds < 0:
        ap.error(f"--model-seeds must be >= 0, got {args.model_seeds}")
    if args.turn_weight != 1.0 and not args.model_seeds:
        ap.error("--turn-weight weighs the transformer's chunks: give --model-seeds too")
    if not args.turn_weight >= 1.0:
        ap.error(f"--turn-weight must be >= 1, got {args.turn_weight}")
    return args


def configure(args: argparse.Namespace) -> tuple[int, bool]:
    """The voice taps the decoder reads and whether the encoder trains anchored; settles ``args.device``,
    ``args.decoder_only`` and ``args.ckpt_dir`` (made) from the options that imply them."""
    args.device = torch.device(args.device)
    # The scene, or a slim decoder, is taught to a decoder that reads the voice (the shipped one's heir):
    # keep its taps.
    heir = args.scene or args.slim
    taps = args.voice_taps or (load_codec(args.encoder).cfg.voice_taps if heir else 0)
    anchored = args.scene and args.anchor > 0
    args.decoder_only = (args.decoder_only or taps > 0 or heir) and not anchored
    args.ckpt_dir = (
        TAUGHT_CKPT_DIR
        if args.teacher
        else ANCHORED_CKPT_DIR
        if anchored
        else SCENE_CKPT_DIR
        if args.scene
        else SLIM_CKPT_DIR
        if args.slim
        else VOICE_CKPT_DIR
        if taps
        else CKPT_DIR
    )
    args.ckpt_dir.mkdir(parents=True, exist_ok=True)
    return taps, anchored
