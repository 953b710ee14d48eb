"""Encode random episodes into latent shards for the transformer (resumable: existing shards are kept).

    nice -n 19 python -m streaming_model.train.dit_data --shards 8

Each shard holds E episodes x K chunks: latents (E, K, C, 16, 16) fp16, character and face token
masks (E, K, 64), the chunk conditions and the identities; plus the identities' reference latents.
"""

from __future__ import annotations

import argparse
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..codec import Codec, to_pixels
from ..loading import CODEC_PATH, load_codec
from ..world.episodes import random_episode, reference_chunk
from ..world.palette import NUM_IDENTITIES
from ..world.scenery import part_cover
from .common import add_device_args, autocast
from .pixels import character_pixels, face_pixels

DATA_DIR = Path("checkpoints/dit_data")
SCENE_DATA_DIR = Path("checkpoints/dit_data_scene")
"""Shards of worlds with a changing scene and the actions toward it (``--scene``), each with its ``scene``."""
FIELDS = ("action", "emotion", "target", "gaze", "side", "speaking", "audio", "phase0")


def _blocks(mask: np.ndarray, patch_px: int) -> np.ndarray:
    """(..., 4, H, W) bool -> (..., 64) bool: any pixel of any frame inside each token's block."""
    any_t = mask.any(-3)
    h, w = any_t.shape[-2:]
    blocks = any_t.reshape(*any_t.shape[:-2], h // patch_px, patch_px, w // patch_px, patch_px)
    return blocks.any((-1, -3)).reshape(*any_t.shape[:-2], -1)


def token_mask(frames: np.ndarray, scenery: np.ndarray | None = None, patch_px: int = 16) -> np.ndarray:
    """(..., 4, H, W, 3) uint8 chunks -> (..., 64) bool: does the character (or the ball, small and
    handled by it) touch this token's pixels. ``scenery``: the same frames without either
    (``render_scenery``), else today's background."""
    return _blocks(character_pixels(frames, scenery), patch_px)


def parts_mask(lamp_show: np.ndarray, door_show: np.ndarray, patch_px: int = 16) -> np.ndarray:
    """(..., 4) presences per frame of chunks -> (..., 64) bool: does the lamp or the door cover any of this
    token's pixels in the chunk (``scenery.part_cover``). The scenery that ``token_mask`` compares frames
    with draws them, so without this they weigh as the sky."""
    cover = part_cover(lamp_show.reshape(-1), door_show.reshape(-1))
    return _blocks(cover.reshape(*lamp_show.shape, *cover.shape[1:]), patch_px)


def face_mask(frames: np.ndarray, light: np.ndarray | None = None, patch_px: int = 16) -> np.ndarray:
    """(..., 64) bool: tokens holding eyes or mouth (small features that carry gaze, emotion, lip sync).
    ``light``: each frame's light (..., 4, 3), divided out first so the face's colours are found at night."""
    return _blocks(face_pixels(frames, light), patch_px)


@torch.no_grad()
def encode_chunks(codec: Codec, chunks: np.ndarray, batch: int = 32) -> np.ndarray:
    """(N, 4, H, W, 3) uint8 -> (N, C, 16, 16) float16 normalised latents (on the codec's device)."""
    out = []
    dev = codec.scale.device
    for i in range(0, len(chunks), batch):
        with autocast(dev):
            out.append(codec.encode(to_pixels(torch.from_numpy(chunks[i : i + batch]).to(dev))).float().cpu())
    return torch.cat(out).numpy().astype(np.float16)


def reference_latents(codec: Codec) -> np.ndarray:
    """(identities, C, 16, 16): the latent of each identity's reference chunk."""
    return encode_chunks(codec, reference_chunk(np.arange(NUM_IDENTITIES)))


def build_shard(codec: Codec, seed: int, episodes: int, chunks: int, path: Path, scene: bool = False) -> None:
    """Render and encode one shard (in groups of 10 worlds to bound memory); ``scene``: worlds with a
    changing scene, whose choices the shard keeps as ``scene`` and the tokens its lamp and door cover as
    ``parts`` (token masks then compare each frame with its scene drawn alone, and the face is found with
    the light divided out)."""
    lat, masks, faces, codes, ids, scenes, parts = [], [], [], [], [], [], []
    for g in range(0, episodes, 10):
        ep = random_episode(seed * 1000 + g, min(10, episodes - g), chunks, scene=scene, scenery=scene)
        n = ep.frames.shape[0]
        if ep.codes.scene is not None:
            scenes.append(ep.codes.scene)
            lamp, door = (_per_chunk(ep.truth[f], chunks) for f in ("lamp_show", "door_show"))
            parts.append(parts_mask(lamp, door).reshape(n, chunks, -1))
        ch = _per_chunk(ep.frames, chunks)
        alone = None if ep.scenery is None else _per_chunk(ep.scenery, chunks)
        light = _per_chunk(ep.truth["light"], chunks) if scene else None
        lat.append(encode_chunks(codec, ch).reshape(n, chunks, *codec_latent_shape(codec)))
        masks.append(token_mask(ch, alone).reshape(n, chunks, -1))
        faces.append(face_mask(ch, light).reshape(n, chunks, -1))
        codes.append({f: getattr(ep.codes, f) for f in FIELDS})
        ids.append(ep.identity)
    # Any: a dict of arrays spread into savez could, to mypy, also fill its allow_pickle flag.
    arrays: dict[str, Any] = {f: np.concatenate([c[f] for c in codes]) for f in FIELDS}
    if scenes:
        arrays["scene"] = np.concatenate(scenes)
        arrays["parts"] = np.concatenate(parts)
    tmp = path.with_suffix(".tmp.npz")
    np.savez(
        tmp,
        latents=np.concatenate(lat),
        masks=np.concatenate(masks),
        faces=np.concatenate(faces),
        identity=np.concatenate(ids),
        reference=reference_latents(codec),
        **arrays,
    )
    tmp.replace(path)


def _per_chunk(a: np.ndarray, chunks: int) -> np.ndarray:
    """(N, 4K, ...) per frame -> (N*K, 4, ...) per chunk."""
    return a.reshape(len(a) * chunks, 4, *a.shape[2:])


def codec_latent_shape(codec: Codec) -> tuple[int, int, int]:
    """(C, 16, 16) of the codec's latents."""
    return (codec.cfg.latent_channels, 16, 16)


def _build_with(codec_path: Path, device: str, seed: int, args: tuple) -> str:
    """``build_shard`` in a background process of its own (one thread): load the codec there, onto
    ``device``."""
    torch.set_num_threads(1)
    build_shard(load_codec(codec_path).to(device), seed, *args)
    return str(args[2])


def main() -> None:
    """Build --shards shards (skipping ones already on disk); shard 0 is held out for validation."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--episodes", type=int, default=50)
    ap.add_argument("--chunks", type=int, default=48)
    ap.add_argument("--threads", type=int, default=2)
    add_device_args(ap)
    ap.add_argument(
        "--scene", action="store_true", help=f"worlds with a changing scene, into {SCENE_DATA_DIR}"
    )
    ap.add_argument(
        "--codec",
        type=Path,
        default=CODEC_PATH,
        help="encode with this codec (one whose encoder was trained too: codec_train --anchor)",
    )
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    data_dir = SCENE_DATA_DIR if args.scene else DATA_DIR
    data_dir.mkdir(parents=True, exist_ok=True)
    todo = [(i, data_dir / f"shard_{i:04d}.npz") for i in range(args.shards)]
    todo = [(i, path) for i, path in todo if not path.exists()]
    seed0 = 9_000 if args.scene else 7_000
    t0 = time.time()
    if args.workers:  # one shard per process, each with its own codec on the device
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(args.workers, mp_context=ctx) as pool:
            jobs = [
                pool.submit(
                    _build_with,
                    args.codec,
                    args.device,
                    seed0 + i,
                    (args.episodes, args.chunks, path, args.scene),
                )
                for i, path in todo
            ]
            for job in as_completed(jobs):
                print(
                    f"{job.result()}: {args.episodes * args.chunks} chunks, {time.time() - t0:.1f} s in",
                    flush=True,
                )
        return
    codec = load_codec(args.codec).to(args.device)
    for i, path in todo:
        t0 = time.time()
        build_shard(codec, seed0 + i, args.episodes, args.chunks, path, args.scene)
        print(f"{path}: {args.episodes * args.chunks} chunks in {time.time() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
