"""Train the latent codec on the procedural world, in the background, resuming from its checkpoint.

    nice -n 19 python -m streaming_model.train.codec_train --minutes 40

Writes checkpoints/codec/ckpt.pt (every few minutes), checkpoints/codec/log.jsonl, and on exit (or with
--export) streaming_model/weights/codec.safetensors.

    nice -n 19 python -m streaming_model.train.codec_train --voice-taps 3 --face-weight 8 --minutes 30

teaches the shipped decoder to draw the mouth from the voice (checkpoints in checkpoints/codec_voice/):
the encoder stays frozen, and half of the encoded chunks are rendered silent, so the decoder learns to
take the mouth from the voice rather than from the latent (the transformer's latents carry no exact
per-frame mouth).

    nice -n 19 python -m streaming_model.train.codec_train --scene --voice-taps 3 --face-weight 8 --minutes 20

teaches the shipped decoder (encoder frozen, as with the voice) to draw the scene (light, lamp, rain and
snow, the door, the ball) from worlds whose scene changes; checkpoints and the exported codec go to
checkpoints/codec_scene/, the shipped codec stays as it is. The frozen encoder loses rain, snow and a ball
in the air or in the paw (measured: 0 through it however the decoder is trained), so

    nice -n 19 python -m streaming_model.train.codec_train --scene --anchor 1 --face-weight 8 --minutes 20

trains the encoder too (into checkpoints/codec_scene_anchored/), anchored: half of the chunks are today's
world, whose latents are pulled toward the shipped encoder's, so that what the transformer learned of them
still holds while the scene finds room in the latents. The transformer's shards must then be encoded again
with it (``dit_data --codec``). Its decoder can then go on learning alone while the transformer trains on
those shards:

    nice -n 19 python -m streaming_model.train.codec_train --scene \
        --encoder checkpoints/codec_scene_anchored/codec.safetensors --face-weight 8 --minutes 20

keeps that codec's encoder and scale (frozen) and trains its decoder, into checkpoints/codec_scene/.

    nice -n 19 python -m streaming_model.train.codec_train --slim --face-weight 8 --minutes 40

teaches a cheaper decoder (``CodecConfig.frame_res`` off: no residual block per frame at 32x32, a third
of the decoder's work) the shipped codec's latents, from the shipped decoder's other layers, its encoder,
scale and voice taps kept (frozen), into checkpoints/codec_slim/ (its codec.safetensors beside the
checkpoint: serve it with ``--backend-option codec=PATH``, judge it with ``onstage eval``).

    nice -n 19 python -m streaming_model.train.codec_train --slim --teacher --model-seeds 60 --minutes 30

teaches it what the shipped decoder draws rather than the world's frames (into checkpoints/codec_slim_taught/):
on the encoder's latents and, half of each batch, on the transformer's own latents of 60 scripted sessions
(``model_latents``), so that it reads what the transformer makes as the shipped decoder does.

    nice -n 19 python -m streaming_model.train.codec_train --slim --start \
        streaming_model/weights/codec_slim.safetensors --teacher --model-seeds 60 --face-weight 8 \
        --lr 2e-4 --minutes 30

teaches the slim decoder on from itself: how the shipped one was made from the one before it, whose
sessions held their actions in one fixed order (BENCHMARKS.md, thirty-fourth session).

    nice -n 19 python -m streaming_model.train.codec_train --slim --lean --start \
        streaming_model/weights/codec_slim.safetensors --teacher --model-seeds 60 --turn-weight 4 \
        --face-weight 8 --lr 3e-4 --minutes 50

teaches a leaner one (``CodecConfig.mix_res`` off too: no residual block where the frames are mixed at
16x16), starting from the given slim decoder's layers, the transformer's turning chunks drawn four times as
often. Not shipped (BENCHMARKS.md, thirty-second and thirty-third sessions): it takes ~5 ms off a chunk and,
so taught (and 15 minutes more at --lr 1e-4), keeps the turn around, but it lost a wave after a sit for one
identity in 6 seeds of 40 where the slim decoder of then lost 3.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.nn import functional as F

from ..codec import Codec, CodecConfig, to_pixels, to_uint8, voice_taps
from ..loading import load_codec
from ..runtime import Generator
from ..weights import WEIGHTS_DIR, save_weights
from .codec_args import configure, parse_args
from .codec_data import ChunkPool, fetch_parts
from .common import Progress, autocast, hardware, load_checkpoint, save_checkpoint
from .model_latents import FIRST_SEED, ModelLatents, cached_latents
from .pixels import character_pixels, face_pixels

VAL_MODEL_SEED = FIRST_SEED + 50_000  # the transformer's held-out session: never taught on


def character_weight(char: torch.Tensor, face_px: torch.Tensor, face: float = 0.0) -> torch.Tensor:
    """Per-pixel loss weight from the character's pixels and its face's (N, 4, H, W) bool: 1 on the
    background, 5 on and around the character (paws, limbs and the ball carry the probes' signal), plus
    `face` on and around the eyes and mouth (a few pixels that carry gaze, emotion and lip sync)."""

    def grown(mask: torch.Tensor, k: int) -> torch.Tensor:
        flat = mask.float().flatten(0, -3)[:, None]
        return F.max_pool2d(flat, k, stride=1, padding=k // 2).reshape(mask.shape)[..., None, :, :]

    w = 1.0 + 4.0 * grown(char, 5)
    return w + face * grown(face_px, 7) if face else w


def drawn_weight(pixels: torch.Tensor, face: float) -> torch.Tensor:
    """``character_weight`` of frames a decoder drew of today's world, (N, 4, 3, H, W) in [-1, 1]: the
    character and its face found in them (a teacher's frames have no truth beside them)."""
    frames = to_uint8(pixels).cpu().numpy()
    char, face_px = torch.from_numpy(character_pixels(frames)), torch.from_numpy(face_pixels(frames))
    return character_weight(char, face_px, face).to(pixels.device)


def psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    """PSNR in dB of two pixel tensors in [-1, 1]."""
    mse = ((a.float().clamp(-1, 1) - b.float()) ** 2).mean() / 4.0
    return float(10 * torch.log10(1.0 / mse))


def export(model: Codec, val: torch.Tensor, info: dict, rescale: bool, path: Path) -> float:
    """Write the codec's weights (fp16) to path; with rescale, first set the latent scale from validation
    data (never after the transformer's data was encoded: that would change its latents)."""
    if rescale:
        with torch.no_grad(), autocast(val.device):
            z = model.encoder(to_pixels(val)).float()
        model.scale.fill_(float(1.0 / z.std()))
    tensors = {k: v.half() if v.is_floating_point() else v for k, v in model.state_dict().items()}
    save_weights(path, "codec", model.cfg, tensors, info)
    return float(model.scale)


def build_model(
    args: argparse.Namespace, taps: int, anchored: bool
) -> tuple[Codec, Codec | None, dict | None]:
    """The codec to train (resumed, or started from the shipped one where the encoder must stay close to
    it), the frozen shipped codec that anchors it, and the checkpoint resumed from."""
    # A decoder taught on keeps the shape of the one it starts from (unless --slim makes it cheaper).
    base = load_codec(args.encoder) if args.decoder_only else load_codec() if anchored else None
    frame_res = not args.slim and (base is None or base.cfg.frame_res)
    mix_res = not args.lean and (base is None or base.cfg.mix_res)
    model = Codec(CodecConfig(voice_taps=taps, frame_res=frame_res, mix_res=mix_res))
    ck = load_checkpoint(args.ckpt_dir / "ckpt.pt")
    if ck is not None:
        model.load_state_dict(ck["model"])
        print(f"resumed at step {ck['step']}, {ck['elapsed'] / 60:.1f} min trained", flush=True)
    if base is not None and args.decoder_only:  # this encoder and scale made the transformer's latents
        if ck is None:  # start from its decoder, or --start's (new voice layers start at zero)
            start = base if args.start is None else load_codec(args.start)
            model.decoder.load_state_dict(start.decoder.state_dict(), strict=False)
        model.encoder.load_state_dict(base.encoder.state_dict())
        model.scale.copy_(base.scale)
        model.encoder.requires_grad_(False)
    anchor = base if anchored else None  # the shipped encoder, which made the transformer's latents
    if anchor is not None:
        if ck is None:
            model.load_state_dict(anchor.state_dict())
        model.scale.copy_(anchor.scale)
        anchor.requires_grad_(False).to(args.device)
    return model.to(args.device), anchor, ck


@dataclass
class _Training:
    """What the training loop works on: the codec, the frozen codec anchoring it (or None), the optimizer,
    the voice taps its decoder reads, and how far training has come over all runs; with ``--teacher``, the
    frozen codec whose decoder it learns from and the transformer's latents (taught on, and held out)."""

    model: Codec
    anchor: Codec | None
    opt: torch.optim.Optimizer
    taps: int
    step: int = 0
    elapsed: float = 0.0
    psnr_log: list = field(default_factory=list)
    teacher: Codec | None = None
    bank: ModelLatents | None = None
    val_bank: ModelLatents | None = None

    def decode(self, z: torch.Tensor, voice: torch.Tensor, by: Codec | None = None) -> torch.Tensor:
        """The decoder's frames (``by``'s decoder's when given) from latents ``z`` in the encoder's units
        and, when it reads the voice, the chunks' ``voice``."""
        codec = self.model if by is None else by
        return codec.decoder(z, voice_taps(voice, self.taps) if self.taps else None)


def _training(args: argparse.Namespace, taps: int, anchored: bool) -> _Training:
    """The codec, its anchor and optimizer (``build_model``), resumed where a checkpoint fits."""
    model, anchor, ck = build_model(args, taps, anchored)
    params = model.decoder.parameters() if args.decoder_only else model.parameters()
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)
    run = _Training(model, anchor, opt, taps)
    if args.teacher:
        run.teacher = load_codec(args.encoder).eval().requires_grad_(False).to(args.device)
    if ck is not None:
        if ck.get("decoder_only", False) == args.decoder_only:  # optimizer state fits the same params
            opt.load_state_dict(ck["opt"])
        run.step, run.elapsed, run.psnr_log = ck["step"], ck["elapsed"], ck["psnr_log"]
    return run


def _train(
    run: _Training,
    args: argparse.Namespace,
    pool: ChunkPool,
    val: torch.Tensor,
    val_voice: torch.Tensor,
    started: float,
) -> Progress:
    """Train until --minutes after ``started`` (or --until-psnr): a line every 50 steps, a checkpoint every
    --ckpt-every-min; the progress, whose clock the last checkpoint and the export read."""
    prog = Progress(args.ckpt_dir / "log.jsonl", run.step + int(args.minutes * 60 * 3), run.step, run.elapsed)
    t_end = started + args.minutes * 60
    last_ck = time.time()
    gen = torch.Generator().manual_seed(run.step)
    loss_acc = drift_acc = 0.0
    while time.time() < t_end:
        if run.step % args.refresh_every == 0 and run.step > 0:
            pool.refresh(gen)
        loss, drift, lr = _step(run, args, pool, gen)
        run.step += 1
        loss_acc += loss
        if drift is not None:
            drift_acc += drift
        if run.step % 50 == 0:
            metrics = {"loss": loss_acc / 50, "lr": lr}
            if run.anchor is not None:  # how far today's world's latents moved (normalised units, squared)
                metrics["drift"] = drift_acc / 50
            loss_acc = drift_acc = 0.0
            if run.step % 200 == 0:
                metrics.update(_validate(run, args.device, val, val_voice))
                run.psnr_log.append((round(prog.elapsed() / 60, 2), run.step, metrics["val_psnr"]))
            prog.report(run.step, **metrics)
            if metrics.get("val_psnr", 0.0) >= args.until_psnr:
                break
        if time.time() - last_ck > args.ckpt_every_min * 60:
            _checkpoint(run, args, prog)
            last_ck = time.time()
    return prog


def _validate(
    run: _Training, dev: torch.device, val: torch.Tensor, val_voice: torch.Tensor
) -> dict[str, float]:
    """PSNR on held-out chunks: of the world's frames (``val_psnr``) and, with a teacher, of the teacher's
    frames of the same latents (``teacher_psnr``) and of the transformer's held-out latents
    (``model_psnr``)."""
    with torch.no_grad(), autocast(dev):
        z = run.model.encoder(to_pixels(val))
        rec = run.decode(z, val_voice)
        metrics = {"val_psnr": psnr(rec, to_pixels(val))}
        if run.teacher is not None:
            metrics["teacher_psnr"] = psnr(rec, run.decode(z, val_voice, by=run.teacher).clamp(-1, 1))
        if run.teacher is not None and run.val_bank is not None:
            zm, vm = run.val_bank.latent.to(dev) / run.model.scale, run.val_bank.voice.to(dev)
            taught = run.decode(zm, vm, by=run.teacher).clamp(-1, 1)
            metrics["model_psnr"] = psnr(run.decode(zm, vm), taught)
    return metrics


def _from_bank(
    run: _Training, z: torch.Tensor, voice: torch.Tensor, gen: torch.Generator, turn_weight: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """``z`` and ``voice`` with their second half replaced by chunks the transformer made (``run.bank``),
    its normalised latents brought to the encoder's units; a turning chunk drawn ``turn_weight`` times as
    often as another."""
    assert run.bank is not None
    half = len(z) // 2
    odds = 1.0 + (turn_weight - 1.0) * run.bank.turning.float()
    pick = torch.multinomial(odds, len(z) - half, replacement=True, generator=gen)
    model_z = (run.bank.latent[pick].to(z.device) / run.model.scale).to(z.dtype)
    return torch.cat([z[:half], model_z]), torch.cat([voice[:half], run.bank.voice[pick].to(voice.device)])


def _step(
    run: _Training, args: argparse.Namespace, pool: ChunkPool, gen: torch.Generator
) -> tuple[float, float | None, float]:
    """One optimiser step on a batch drawn from the pool: its loss, its anchor's drift (None without one
    or without today's world in the batch) and its learning rate."""
    dev = args.device
    pick = torch.randint(len(pool.parts.target), (args.batch,), generator=gen)
    batch, voice = pool.parts.target[pick].to(dev), pool.parts.voice[pick].to(dev)
    # With the voice, half the chunks are encoded from their silent rendering: the mouth must come
    # from the voice.
    silent = (torch.rand(args.batch, generator=gen) < 0.5)[:, None, None, None, None] & (run.taps > 0)
    x = to_pixels(batch)
    x_in = to_pixels(torch.where(silent.to(dev), pool.parts.encoder_in[pick].to(dev), batch))
    lr = args.lr * min(1.0, (run.step + 1) / 200)
    for g in run.opt.param_groups:
        g["lr"] = lr
    with autocast(dev):
        if args.decoder_only:
            with torch.no_grad():
                z = run.model.encoder(x_in)
        else:
            z = run.model.encoder(x_in)
        if run.bank is not None:  # half the batch: latents the transformer made instead
            z, voice = _from_bank(run, z, voice, gen, args.turn_weight)
        # Noise on the latent makes the decoder tolerant of the diffusion model's small errors.
        zn = z + 0.05 * z.detach().std() * torch.randn(z.shape, generator=gen).to(dev)
        y = run.decode(zn, voice)
        if run.teacher is not None:  # what the teacher draws of the same latents is the target
            with torch.no_grad():
                x = run.decode(zn, voice, by=run.teacher).float()
    if run.teacher is not None:
        w = drawn_weight(x, args.face_weight)
    else:
        w = character_weight(pool.parts.char[pick].to(dev), pool.parts.face[pick].to(dev), args.face_weight)
    err = y.float() - x
    loss = (w * (err * err + 0.5 * err.abs())).mean() + 1e-4 * z.float().pow(2).mean()
    today = pool.parts.today[pick].to(dev)
    drift = None
    if run.anchor is not None and today.any():
        with torch.no_grad(), autocast(dev):
            z0 = run.anchor.encoder(x_in[today])
        drift = ((z[today].float() - z0.float()) * run.model.scale).pow(2).mean()
        loss = loss + args.anchor * drift
    run.opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(run.model.parameters(), 1.0)
    run.opt.step()
    return loss.item(), None if drift is None else drift.item(), lr


def _checkpoint(run: _Training, args: argparse.Namespace, prog: Progress) -> None:
    """Save the codec, its optimizer and how far training has come."""
    save_checkpoint(
        args.ckpt_dir / "ckpt.pt",
        {
            "model": run.model.state_dict(),
            "opt": run.opt.state_dict(),
            "step": run.step,
            "elapsed": prog.elapsed(),
            "psnr_log": run.psnr_log,
            "decoder_only": args.decoder_only,
        },
    )


def _export_trained(
    run: _Training, args: argparse.Namespace, prog: Progress, val: torch.Tensor, anchored: bool
) -> None:
    """Export the trained codec (with --scene or --slim beside its checkpoint, else as the shipped one)."""
    info = {
        "steps": run.step,
        "train_minutes": round(prog.elapsed() / 60, 1),
        "psnr_log": run.psnr_log[-20:],
        "hardware": hardware(args.device),
    }
    if args.teacher:
        info.update(teacher=str(args.encoder), model_seeds=args.model_seeds, turn_weight=args.turn_weight)
    beside = args.scene or args.slim
    out = args.ckpt_dir / "codec.safetensors" if beside else WEIGHTS_DIR / "codec.safetensors"
    scale = export(run.model, val, info, rescale=not (args.decoder_only or anchored), path=out)
    print(f"exported codec, latent scale {scale:.4f}", flush=True)


def _bank_latents(run: _Training, args: argparse.Namespace) -> None:
    """The transformer's latents of --model-seeds scripted sessions to teach on, and of a held-out one
    (every other chunk) to validate on; generated once, kept beside the checkpoint."""
    gen = Generator.load(codec_path=args.encoder)  # the codec the transformer's latents were encoded with
    seeds = list(range(FIRST_SEED, FIRST_SEED + args.model_seeds))
    run.bank = cached_latents(args.ckpt_dir / "model_latents.pt", gen, seeds)
    held = cached_latents(args.ckpt_dir / "model_latents_val.pt", gen, [VAL_MODEL_SEED])
    run.val_bank = ModelLatents(*(part[::2] for part in held))


def main() -> None:
    """Train for --minutes (this run), checkpointing; resume if a checkpoint exists."""
    started = time.time()  # the deadline counts the pool's first renders: a staged script keeps to it
    args = parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    taps, anchored = configure(args)
    run = _training(args, taps, anchored)
    # 32 held-out chunks (seeds >= 10000 are never trained on); validation encodes the true frames.
    held_out = fetch_parts(10_000, 8, 4, taps, args.scene)
    val, val_voice = held_out.target.to(args.device), held_out.voice.to(args.device)
    if args.model_seeds:
        _bank_latents(run, args)
    pool = ChunkPool(taps, args.scene, anchored, run.step * 8, args.pool, args.workers)
    prog = _train(run, args, pool, val, val_voice, started)
    pool.close()
    _checkpoint(run, args, prog)
    _export_trained(run, args, prog, val, anchored)


if __name__ == "__main__":
    main()
