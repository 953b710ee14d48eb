"""What the codec is trained on: chunks of random worlds, and a pool of them kept fresh while training.

A pool refill renders whole worlds (seconds of CPU); with ``workers`` the pool is refilled by background
processes, so an accelerator is never kept waiting for the renderer.
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import Future, ProcessPoolExecutor
from typing import NamedTuple

import numpy as np
import torch

from ..codec import chunk_voices
from ..condition import ChunkCodes
from ..world import palette as P
from ..world.episodes import Episode, random_codes, random_episode, simulate
from .pixels import character_pixels, face_pixels

FRAME_SHAPE = (4, 128, 128, 3)
POOL_WORLDS, POOL_CHUNKS = 16, 15  # one render: this many worlds x chunks


def voiced_chunks(
    seed: int, n: int, k: int, taps: int, scene: bool = False
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random episodes as (frames, the same rendered silent, voice values): (n*k, 4, H, W, 3) twice and
    (n*k, taps - 1 + 4), each chunk's voice with the taps - 1 values before it."""
    frames, silent, voice, _, _ = _voiced(seed, n, k, taps, scene)
    return frames, silent, voice


def _voiced(
    seed: int, n: int, k: int, taps: int, scene: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``voiced_chunks``, and the character's and its face's pixels (n*k, 4, H, W) bool, found against
    the scenery and with the light divided out."""
    rng = np.random.default_rng(seed)
    identity = rng.integers(0, P.NUM_IDENTITIES, n)
    codes = random_codes(rng, n, k, scene)
    silent = ChunkCodes(**{**vars(codes), "speaking": np.zeros_like(codes.speaking)})
    ep = simulate(codes, identity, scenery=scene)
    quiet = simulate(silent, identity).frames.reshape(n * k, *FRAME_SHAPE)
    frames = ep.frames.reshape(n * k, *FRAME_SHAPE)
    voice = torch.from_numpy(codes.audio * codes.speaking[..., None]).reshape(n, 4 * k)
    per_chunk = chunk_voices(voice, taps)
    char, face = _pixels(frames, ep)
    return torch.from_numpy(frames), torch.from_numpy(quiet), per_chunk.reshape(n * k, -1), char, face


def _pixels(frames: np.ndarray, ep: Episode) -> tuple[torch.Tensor, torch.Tensor]:
    """The character's and its face's pixels in an episode's chunks."""
    alone = None if ep.scenery is None else ep.scenery.reshape(frames.shape)
    light = ep.truth["light"].reshape(*frames.shape[:2], 3)
    return torch.from_numpy(character_pixels(frames, alone)), torch.from_numpy(face_pixels(frames, light))


class PoolParts(NamedTuple):
    """A batch of training chunks: what the decoder must draw, what the encoder sees (the same, or
    rendered silent), the voice, whether it is today's world (anchoring), the character's pixels and its
    face's."""

    target: torch.Tensor
    encoder_in: torch.Tensor
    voice: torch.Tensor
    today: torch.Tensor
    char: torch.Tensor
    face: torch.Tensor


def fetch_parts(seed: int, n: int, k: int, taps: int, scene: bool) -> PoolParts:
    """Fresh episodes as PoolParts (a top-level function: background processes run it)."""
    if taps:
        frames, quiet, voice, char, face = _voiced(seed, n, k, taps, scene)
    else:
        ep = random_episode(seed, n, k, scene, scenery=scene)
        plain = ep.frames.reshape(n * k, *FRAME_SHAPE)
        frames = quiet = torch.from_numpy(plain)
        (char, face), voice = _pixels(plain, ep), torch.zeros(n * k, 0)
    return PoolParts(frames, quiet, voice, torch.full((len(frames),), not scene), char, face)


class ChunkPool:
    """Training chunks in memory; ``refresh`` swaps in fresh episodes for a random part of them.

    ``scene``: worlds with a changing scene; ``alternate``: every other render today's world instead
    (anchored training pulls today's world's latents toward the shipped encoder's).
    Without workers a refresh renders in this process; with them, it takes whatever the background
    processes have finished and keeps ``workers`` renders in flight.
    """

    def __init__(
        self,
        taps: int,
        scene: bool,
        alternate: bool,
        first_seed: int,
        fetches: int,
        workers: int = 0,
    ) -> None:
        self.taps, self.scene, self.alternate, self.seed = taps, scene, alternate, first_seed
        self.executor = (
            ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) if workers else None
        )
        self.pending: list[Future[PoolParts]] = []
        if self.executor is not None:
            for _ in range(fetches):
                self._submit()
            first = [f.result() for f in self.pending]
            self.pending = []
            for _ in range(workers):
                self._submit()
        else:
            first = [self._fetch_here() for _ in range(fetches)]
        self.parts = PoolParts(*(torch.cat(p) for p in zip(*first, strict=True)))

    def _scene(self, seed: int) -> bool:
        return self.scene and not (self.alternate and seed % 2)

    def _next_job(self) -> tuple[int, int, int, int, bool]:
        """``fetch_parts``'s arguments for the next render."""
        seed = self.seed
        self.seed += 1
        return seed, POOL_WORLDS, POOL_CHUNKS, self.taps, self._scene(seed)

    def _fetch_here(self) -> PoolParts:
        return fetch_parts(*self._next_job())

    def _submit(self) -> None:
        assert self.executor is not None
        self.pending.append(self.executor.submit(fetch_parts, *self._next_job()))

    def refresh(self, gen: torch.Generator) -> None:
        """Replace random chunks with fresh episodes (those ready, with workers; one render without)."""
        if self.executor is None:
            fresh = [self._fetch_here()]
        else:
            done = [f for f in self.pending if f.done()]
            self.pending = [f for f in self.pending if not f.done()]
            fresh = [f.result() for f in done]
            for _ in done:
                self._submit()
        for new in fresh:
            idx = torch.randperm(len(self.parts.target), generator=gen)[: len(new.target)]
            for part, new_part in zip(self.parts, new, strict=True):
                part[idx] = new_part

    def close(self) -> None:
        """Stop the background processes."""
        if self.executor is not None:
            self.executor.shutdown(wait=False, cancel_futures=True)
