"""3D rotary position embedding (time, height, width), fixed (not learned).

The head dimension is split in three: the first part rotates with the chunk's time position, the others
with the token's row and column. Rotation of pairs (i, i + D/2) by pos * freq_i.
Rotations compose, so keys stored already rotated can be moved in time by rotating them again by the
time delta (that is how the KV cache rebases positions without recomputing keys).
"""

from __future__ import annotations

import torch


def axis_freqs(dims: tuple[int, int, int], bases: tuple[float, float, float]) -> list[torch.Tensor]:
    """Frequencies per axis: dims[i] / 2 pairs each."""
    return [b ** (-torch.arange(0, d, 2, dtype=torch.float64) / d) for d, b in zip(dims, bases, strict=True)]


class Rope:
    """Precomputed frequencies for one head layout."""

    def __init__(self, head_dim: int, dims: tuple[int, int, int], bases: tuple[float, float, float]) -> None:
        if sum(dims) != head_dim or any(d % 2 for d in dims):
            raise ValueError(f"rope dims {dims} must be even and sum to head_dim {head_dim}")
        self.dims = dims
        self.freqs = axis_freqs(dims, bases)

    def angles(self, t: torch.Tensor, h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """Angles (L, head_dim / 2) for token positions given as three (L,) tensors."""
        parts = [
            p.double()[:, None] * f.to(p.device)[None] for p, f in zip((t, h, w), self.freqs, strict=True)
        ]
        return torch.cat(parts, dim=-1)

    def time_angles(self, delta: float, length: int) -> torch.Tensor:
        """Angles that move every token by delta in time only (rows and columns unchanged)."""
        zeros = torch.zeros(length)
        return self.angles(torch.full((length,), float(delta)), zeros, zeros)


def cos_sin(angles: torch.Tensor, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin tables in the working dtype."""
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x (..., L, D) by tables (L, D / 2); computed in float32 for stable keys."""
    half = x.shape[-1] // 2
    xf = x.float()
    x1, x2 = xf[..., :half], xf[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
