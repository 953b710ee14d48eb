"""Few-step sampling: the noise schedule and noise seeded per (session seed, chunk index, step).

The model predicts x0. A step at noise level t turns the current noisy latent into an x0 estimate; the
next level is reached by re-noising that estimate with fresh seeded noise (consistency-style sampling),
so the same (seed, chunk, step) always draws the same noise and regeneration is exact.
"""

from __future__ import annotations

import hashlib

import torch

COMMIT_STEP = -1  # the step index whose noise is used for the context noise at commit time
DAMAGE_STEP = -2  # the step index of the noise a deliberately damaged cache adds (``cache_noise``)
CONTEXT_T = 0.05  # noise level of committed context chunks (the model is trained on noisy context)

STEPS = 1
"""Denoise steps per chunk by default. One step (half the DiT's time) is within the noise floor of two on
every ``onstage eval`` metric over 20 seeds (BENCHMARKS.md); ``steps=2`` stays selectable."""


def levels(steps: int) -> list[float]:
    """Noise levels visited by an n-step sampler: 1, 1 - 1/n, ..., 1/n."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    return [1.0 - i / steps for i in range(steps)]


def seeded_noise(seed: int, chunk: int, step: int, shape: tuple[int, ...]) -> torch.Tensor:
    """Standard normal noise that depends only on (seed, chunk, step)."""
    digest = hashlib.blake2b(f"{seed}:{chunk}:{step}".encode(), digest_size=8).digest()
    gen = torch.Generator().manual_seed(int.from_bytes(digest, "little") & ((1 << 63) - 1))
    return torch.randn(shape, generator=gen)


def renoise(x0: torch.Tensor, noise: torch.Tensor, t: float) -> torch.Tensor:
    """The flow-matching interpolation x_t = (1 - t) x0 + t noise."""
    return (1.0 - t) * x0 + t * noise
