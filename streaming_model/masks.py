"""Binary masks over frames (..., H, W): growing and opening with a 3x3 square, as the probes use them."""

from __future__ import annotations

import numpy as np


def grow(mask: np.ndarray) -> np.ndarray:
    """Binary dilation with a 3x3 square (nothing grows in from the edges)."""
    out = mask.copy()
    out[..., 1:, :] |= mask[..., :-1, :]
    out[..., :-1, :] |= mask[..., 1:, :]
    grown = out.copy()
    grown[..., :, 1:] |= out[..., :, :-1]
    grown[..., :, :-1] |= out[..., :, 1:]
    return grown


def opened(mask: np.ndarray) -> np.ndarray:
    """Binary opening with a 3x3 square: what survives an erosion, grown back (marks thinner than three
    pixels go, thicker shapes stay)."""
    return grow(~grow(~mask))
