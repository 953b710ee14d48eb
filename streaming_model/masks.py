"""Binary masks over frames (..., H, W), as the probes make and clean them: pixels near a colour, growing
and opening with a 3x3 square."""

from __future__ import annotations

import numpy as np

COLOR_TOL = 70.0
"""L1 distance (summed over RGB) within which a pixel has a colour."""


def near(frames: np.ndarray, color: np.ndarray, tol: float = COLOR_TOL) -> np.ndarray:
    """(...) bool: pixels (..., 3) within ``tol`` (L1) of ``color``."""
    return np.abs(frames - color).sum(-1) < tol


def grow(mask: np.ndarray) -> np.ndarray:
    """Binary dilation with a 3x3 square (nothing grows in from the edges)."""
    out = mask.copy()
    out[..., 1:, :] |= mask[..., :-1, :]
    out[..., :-1, :] |= mask[..., 1:, :]
    grown = out.copy()
    grown[..., :, 1:] |= out[..., :, :-1]
    grown[..., :, :-1] |= out[..., :, 1:]
    return grown


def opened(mask: np.ndarray, steps: int = 1) -> np.ndarray:
    """Binary opening with a (2 steps + 1) square: what survives ``steps`` 3x3 erosions, grown back as
    often (marks thinner than 2 steps + 1 pixels go, thicker shapes stay)."""
    out = mask
    for _ in range(steps):
        out = ~grow(~out)
    for _ in range(steps):
        out = grow(out)
    return out
