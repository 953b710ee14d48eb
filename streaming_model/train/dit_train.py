"""Train the causal transformer on latent shards, in the background, resuming from its checkpoint.

    nice -n 19 python -m streaming_model.train.dit_train --minutes 60

Recipe (from the failed first try in shared/ENVIRONMENT.md):
- x0 prediction; target noise levels drawn mostly at the levels the 2-step sampler visits (1.0, 0.5),
  some at the 4-step teacher's levels, the rest skewed toward high noise;
- teacher forcing over sequences of T chunks in one pass: clean context copies and noisy targets, a
  block-causal mask giving each target the reference plus the `window` previous clean chunks, exactly
  what the streaming cache gives at inference;
- context chunks noised to a random small level (the model is told the level) against drift, and a share
  of batches whose context is the model's own predictions (``--rollout-prob``), one level or several
  deep (``--rollout-depth``: a turn the model starts too slowly is then seen as it compounds);
- extra loss weight on the tokens the character touches (5x) and its eyes and mouth (13x), and on an
  action's first chunks (4x), where its parameters show; with a scene, optionally on the tokens its lamp
  and door cover (``--part-weight``) or that a change of scene moved (``--change-weight``); a quarter of
  the sequences placed on onsets of actions the model is slow to learn (``--focus``, by default turn,
  whose direction depends on the facing before it); bf16 autocast where the device computes bf16
  natively (`common.bf16`), else fp32; AdamW with warmup; EMA weights.
Writes checkpoints/dit/ckpt.pt, checkpoints/dit/log.jsonl and streaming_model/weights/dit.safetensors.
"""

from __future__ import annotations

import argparse
import copy
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..dit import DiT, DiTConfig, grown_for_scene, masked_attend, with_scene
from ..loading import DIT_PATH, load_dit
from ..weights import WEIGHTS_DIR, save_weights
from .batch_stream import batch_stream
from .common import Progress, add_device_args, autocast, hardware, load_checkpoint, save_checkpoint
from .dit_batches import SEQ, Batcher, Shards, token_means
from .dit_data import DATA_DIR, SCENE_DATA_DIR

CKPT_DIR = Path("checkpoints/dit")
SCENE_CKPT_DIR = Path("checkpoints/dit_scene")
"""``--scene``: checkpoints and the exported weights of the transformer learning the scene (promoted to
streaming_model/weights/ by hand once ``onstage eval`` finds it within the noise floor)."""


def loss_on(
    model: DiT,
    bt: dict[str, torch.Tensor],
    mask: torch.Tensor,
    rollout: torch.Generator | None = None,
    depth: int = 1,
) -> torch.Tensor:
    """Weighted x0 MSE over the noisy chunks' tokens.

    rollout: when given (a noise generator), the context is first replaced by the model's own one-step
    predictions (``own_context``), so the model learns to continue from, and correct, what it generated
    itself (against drift); ``depth`` levels deep.
    """
    c_known = known_conditions(model, bt)
    c = torch.cat([c_known, model.embed_cond(bt["action"], bt["emotion"], bt["cont"], bt["t"])], dim=1)
    cos, sin = model.rope_tables(bt["pos"])
    z = bt["z"]
    if rollout is not None:
        own = own_context(model, bt, c_known, (cos, sin), mask, rollout, depth)
        z = torch.cat([own, z[:, SEQ:]], dim=1)
    with autocast(z.device):
        # Noisy chunk j's base is the chunk before it as the model sees it: the reference for j = 0
        # (episodes start in the reference pose), else context chunk j - 1; both sit at index j.
        base = torch.cat([torch.zeros_like(z[:, :SEQ]), z[:, :SEQ]], dim=1)
        pred, _ = model.run(z, c, cos, sin, masked_attend(mask), base=base)
    pred = pred[:, SEQ:]
    err_tok = token_means((pred - bt["x0"]).pow(2), model.cfg.patch)
    w = bt["weight"]
    return (err_tok * w).sum() / w.sum().clamp_min(1.0)


def known_conditions(model: DiT, bt: dict[str, torch.Tensor]) -> torch.Tensor:
    """The conditions of the reference and the context chunks (at their noise levels) of a batch."""
    ref_c = model.reference_cond(bt["z"].shape[0])
    ctx_c = model.embed_cond(bt["action"][:, :-1], bt["emotion"][:, :-1], bt["cont"][:, :-1], bt["t_ctx"])
    return torch.cat([ref_c, ctx_c], dim=1)


@torch.no_grad()
def own_context(
    model: DiT,
    bt: dict[str, torch.Tensor],
    c_known: torch.Tensor,
    rope: tuple[torch.Tensor, torch.Tensor],
    mask: torch.Tensor,
    rollout: torch.Generator,
    depth: int,
) -> torch.Tensor:
    """The reference and the context as the model would make them: each context chunk its one-step
    prediction (from pure noise, at noise level 1) given the chunks before it (under the reference's and
    the context's conditions, ``c_known``), re-noised like any context. The first level predicts from the
    true context, each further level from the level before's predictions: the k-th context chunk is then
    as a session makes it after min(k, ``depth``) chunks of its own (depth 1 corrects one chunk's error,
    deeper ones the error that builds up, as in a turn that starts slowly and stays slow)."""
    if depth < 1:
        raise ValueError(f"the rollout's depth must be >= 1, not {depth}")
    z = bt["z"]
    t_ctx = bt["t_ctx"][..., None, None, None]
    ctx = z[:, :SEQ]
    with autocast(z.device):
        one = model.embed_cond(bt["action"], bt["emotion"], bt["cont"], torch.ones_like(bt["t"]))
        c_one = torch.cat([c_known, one], dim=1)
        for _ in range(depth):
            pure = torch.randn(z[:, SEQ:].shape, generator=rollout).to(z.device)
            base = torch.cat([torch.zeros_like(ctx), ctx], dim=1)
            own, _ = model.run(torch.cat([ctx, pure], dim=1), c_one, *rope, masked_attend(mask), base)
            fresh = torch.randn(own[:, SEQ:-1].shape, generator=rollout).to(z.device)
            ctx = torch.cat([z[:, :1], (1 - t_ctx) * own[:, SEQ:-1] + t_ctx * fresh], dim=1)
    return ctx


def train_step(
    model: DiT,
    ema: DiT,
    opt: torch.optim.Optimizer,
    batch: dict[str, torch.Tensor],
    mask: torch.Tensor,
    step: int,
    rollout: torch.Generator | None = None,
    depth: int = 1,
) -> torch.Tensor:
    """One optimiser step on ``batch`` and the EMA's update; the loss, left on the device (reading it
    each step would make the host wait for the GPU)."""
    loss = loss_on(model, batch, mask, rollout, depth)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    decay = min(0.995, (1 + step) / (10 + step))
    with torch.no_grad():  # one fused update of every parameter, not a Python loop over them
        torch._foreach_lerp_(list(ema.parameters()), list(model.parameters()), 1 - decay)
    return loss.detach()


def on(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    """A batch moved to the training device."""
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


def export(
    ema: DiT, step: int, minutes: float, val_log: list, path: Path = WEIGHTS_DIR / "dit.safetensors"
) -> None:
    """Write the EMA weights (fp16) as the shipped transformer (or to ``path``)."""
    tensors = {k: v.half() for k, v in ema.state_dict().items()}
    info = {
        "steps": step,
        "train_minutes": round(minutes, 1),
        "val_log": val_log[-30:],
        "hardware": hardware(next(ema.parameters()).device),
    }
    save_weights(path, "dit", ema.cfg, tensors, info)


def _add_run_args(ap: argparse.ArgumentParser) -> None:
    """How long, how fast and where this run trains, and how often it checkpoints."""
    ap.add_argument("--minutes", type=float, default=60.0)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument(
        "--lr-end",
        type=float,
        default=None,
        help="anneal the learning rate linearly to this over this run's minutes (default: keep --lr)",
    )
    ap.add_argument("--threads", type=int, default=2)
    add_device_args(ap, workers=False)
    ap.add_argument(
        "--loader-workers",
        type=int,
        default=0,
        help="processes building batches ahead of the step (0: built here; on a GPU a few keep it busy)",
    )
    ap.add_argument("--ckpt-every-min", type=float, default=4.0)


def _add_sampling_args(ap: argparse.ArgumentParser) -> None:
    """What the batches hold: rollouts on the model's own predictions, onsets and changes of scene."""
    ap.add_argument("--rollout-prob", type=float, default=0.25, help="share of batches on own predictions")
    ap.add_argument("--rollout-after", type=int, default=1500, help="start rollouts at this step")
    ap.add_argument(
        "--rollout-depth",
        type=int,
        default=1,
        help="levels of own predictions a rollout's context is made of (chunk j's context: min(j, depth))",
    )
    ap.add_argument(
        "--focus",
        nargs="*",
        default=["turn"],
        help="actions whose onsets are sampled more often",
    )
    ap.add_argument("--focus-prob", type=float, default=0.25, help="share of sequences placed on them")
    ap.add_argument(
        "--change-prob", type=float, default=0.25, help="with a scene: share placed on its changes"
    )
    ap.add_argument(
        "--change-weight",
        type=float,
        default=0.0,
        help="with a scene: extra loss weight on the tokens that changed most in a change's first chunks",
    )
    ap.add_argument(
        "--part-weight",
        type=float,
        default=0.0,
        help="with a scene: extra loss weight on the tokens the lamp and the door cover, wherever they show",
    )


def parse_args() -> argparse.Namespace:
    """The command line (module docstring)."""
    ap = argparse.ArgumentParser()
    _add_run_args(ap)
    _add_sampling_args(ap)
    ap.add_argument(
        "--scene",
        action="store_true",
        help=f"learn the scene: from the shipped weights grown to read it (dit.with_scene), on {SCENE_DATA_DIR} "
        f"and any shards of today's world in {DATA_DIR}, checkpoints and weights in {SCENE_CKPT_DIR}",
    )
    ap.add_argument(
        "--start",
        type=Path,
        help="with --scene and no checkpoint: start from this transformer (one an earlier run exported, "
        "given condition maps if it has none: dit.with_maps) rather than the shipped weights grown",
    )
    args = ap.parse_args()
    if args.rollout_depth < 1:  # said now, not at the first rollout, which may come an hour into the run
        ap.error(f"--rollout-depth must be >= 1, not {args.rollout_depth}")
    return args


@dataclass
class _Training:
    """What the training loop works on: the transformer, its EMA and optimizer, how far training has come
    over all runs, and where its checkpoint and exported weights go."""

    model: DiT
    ema: DiT
    opt: torch.optim.Optimizer
    ckpt_dir: Path
    exported: Path
    step: int = 0
    elapsed: float = 0.0
    val_log: list = field(default_factory=list)
    fresh_moments: bool = True  # False once a checkpoint's optimizer state is loaded


WARMUP_STEPS = 300


def learning_rate(lr: float, lr_end: float | None, fresh_step: int | None, done: float) -> float:
    """The rate at a point of a run: warmed up over its first ``WARMUP_STEPS`` where the optimizer's moments
    start afresh (``fresh_step``: steps into the run; None where a checkpoint's moments were resumed), and
    annealed toward ``lr_end`` by ``done``, the share of the run's minutes gone (by the clock: steps per
    second vary with what else runs here)."""
    rate = lr if fresh_step is None else lr * min(1.0, (fresh_step + 1) / WARMUP_STEPS)
    return rate if lr_end is None else rate + (lr_end - rate) * done


def _training(args: argparse.Namespace, dev: torch.device) -> _Training:
    """The transformer to train (grown to read the scene with --scene), its EMA and optimizer, resumed."""
    ckpt_dir = SCENE_CKPT_DIR if args.scene else CKPT_DIR
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    exported = ckpt_dir / "dit.safetensors" if args.scene else WEIGHTS_DIR / "dit.safetensors"
    cfg = with_scene(DiT(DiTConfig())).cfg if args.scene else DiTConfig()
    model = DiT(cfg)
    model.to(dev)
    ema = copy.deepcopy(model).requires_grad_(False)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.99), weight_decay=0.01)
    run = _Training(model, ema, opt, ckpt_dir, exported)
    _resume(run, args)
    return run


def _resume(run: _Training, args: argparse.Namespace) -> None:
    """Go on from the checkpoint if there is one, else from the shipped weights (or --start's)."""
    ck = load_checkpoint(run.ckpt_dir / "ckpt.pt")
    if ck is not None:
        run.model.load_state_dict(ck["model"])
        run.ema.load_state_dict(ck["ema"])
        run.opt.load_state_dict(ck["opt"])
        run.step, run.elapsed, run.val_log = ck["step"], ck["elapsed"], ck["val_log"]
        run.fresh_moments = False
        print(f"resumed at step {run.step}, {run.elapsed / 60:.1f} min trained", flush=True)
    elif args.start is not None or DIT_PATH.exists():
        # A machine without checkpoints (checkpoints/ is not in git): go on from the shipped weights (or
        # --start's) rather than from scratch; only the optimizer's moments start afresh.
        loaded, info = load_dit(args.start or DIT_PATH)
        start = grown_for_scene(loaded) if args.scene else loaded
        run.model.load_state_dict(start.state_dict())
        run.ema.load_state_dict(start.state_dict())
        run.step, run.elapsed, run.val_log = (
            info.get("steps", 0),
            60.0 * info.get("train_minutes", 0.0),
            info.get("val_log", []),
        )
        source = args.start or "the shipped weights"
        print(f"continuing from {source}: step {run.step}, {run.elapsed / 60:.1f} min trained", flush=True)


def _batchers(args: argparse.Namespace, cfg: DiTConfig) -> tuple[Batcher, Batcher]:
    """Batches for training (with --focus and the scene's changes) and for validation, from the shards."""
    shards = Shards(SCENE_DATA_DIR, plain=DATA_DIR) if args.scene else Shards(DATA_DIR)
    print(
        f"data: {len(shards.files) - 1} train shards, {shards.train['latents'].shape[:2]} episodes x chunks",
        flush=True,
    )
    train_b = Batcher(
        cfg,
        shards.train,
        shards.reference,
        tuple(args.focus),
        args.focus_prob,
        args.change_prob,
        args.change_weight,
        part_weight=args.part_weight,
    )
    return train_b, Batcher(cfg, shards.val, shards.reference)


def _train(
    run: _Training, args: argparse.Namespace, train_b: Batcher, val_b: Batcher, dev: torch.device
) -> None:
    """Train until this run's --minutes are up: a line every 25 steps, a checkpoint and export every
    --ckpt-every-min and at the end."""
    mask, val_mask = train_b.mask.to(dev), val_b.mask.to(dev)
    val_batches = [on(val_b.batch(torch.Generator().manual_seed(i), 4), dev) for i in range(3)]
    gen = torch.Generator().manual_seed(1 + run.step)  # rollouts; the batches have their own stream
    stream = batch_stream(train_b, 1 + run.step, args.batch, args.loader_workers, pin=dev.type == "cuda")
    prog = Progress(
        run.ckpt_dir / "log.jsonl", run.step + int(args.minutes * 60 / 1.5), run.step, run.elapsed
    )
    t_end = time.time() + args.minutes * 60
    last_ck = time.time()
    loss_acc, n_acc = torch.zeros((), device=dev), 0  # summed on the device: no wait on each step's loss
    first_step = run.step
    while time.time() < t_end:
        done = 1.0 - max(0.0, t_end - time.time()) / (args.minutes * 60)
        lr = learning_rate(args.lr, args.lr_end, run.step - first_step if run.fresh_moments else None, done)
        for g in run.opt.param_groups:
            g["lr"] = lr
        use_rollout = (
            run.step >= args.rollout_after and torch.rand(1, generator=gen).item() < args.rollout_prob
        )
        batch = on(next(stream), dev)
        loss = train_step(
            run.model,
            run.ema,
            run.opt,
            batch,
            mask,
            run.step,
            gen if use_rollout else None,
            args.rollout_depth,
        )
        run.step += 1
        loss_acc, n_acc = loss_acc + loss, n_acc + 1
        if run.step % 25 == 0:
            metrics = {"loss": loss_acc.item() / n_acc, "lr": lr}
            loss_acc, n_acc = torch.zeros((), device=dev), 0
            _report(run, prog, metrics, val_batches, val_mask)
        if time.time() - last_ck > args.ckpt_every_min * 60:
            _checkpoint(run, prog)
            last_ck = time.time()
    _checkpoint(run, prog)


def _report(
    run: _Training,
    prog: Progress,
    metrics: dict[str, float],
    val_batches: list[dict[str, torch.Tensor]],
    val_mask: torch.Tensor,
) -> None:
    """Log ``metrics``, every 200 steps with the EMA's validation loss (kept in the validation log too)."""
    if run.step % 200 == 0:
        with torch.no_grad():
            metrics["val_loss"] = float(
                np.mean([loss_on(run.ema, vb, val_mask).item() for vb in val_batches])
            )
        run.val_log.append((round(prog.elapsed() / 60, 2), run.step, round(metrics["val_loss"], 5)))
    prog.report(run.step, **metrics)


def _checkpoint(run: _Training, prog: Progress) -> None:
    """Save the checkpoint and export the EMA weights."""
    save_checkpoint(
        run.ckpt_dir / "ckpt.pt",
        {
            "model": run.model.state_dict(),
            "ema": run.ema.state_dict(),
            "opt": run.opt.state_dict(),
            "step": run.step,
            "elapsed": prog.elapsed(),
            "val_log": run.val_log,
        },
    )
    export(run.ema, run.step, prog.elapsed() / 60, run.val_log, run.exported)


def main() -> None:
    """Train for --minutes (this run), checkpointing and exporting; resume if a checkpoint exists."""
    args = parse_args()
    torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    run = _training(args, dev)
    train_b, val_b = _batchers(args, run.model.cfg)
    _train(run, args, train_b, val_b, dev)


if __name__ == "__main__":
    main()
