"""How the world's continuous state moves toward a goal, a fraction of the way each frame."""

from __future__ import annotations

import numpy as np


def approach(cur: np.ndarray, target: np.ndarray | float, rate: float | np.ndarray) -> np.ndarray:
    """``rate`` of the way from ``cur`` to ``target`` (one frame of an exponential ease)."""
    return cur + (target - cur) * rate


def fade(cur: np.ndarray, on: np.ndarray, rate: float) -> np.ndarray:
    """Ease toward 1 where ``on``, else 0; snapped at the end so that a finished fade is exact."""
    out = approach(cur, on.astype(np.float32), rate)
    return np.where(np.abs(out - on) < 0.01, on.astype(np.float32), out).astype(np.float32)
