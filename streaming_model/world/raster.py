"""Vectorised soft-edged 2D primitives over a batch of frames.

Every primitive returns a coverage in [0, 1] of shape (N, H, W); edges are anti-aliased over about one
pixel so that the codec sees smooth images and small motions change pixels continuously.
"""

from __future__ import annotations

import numpy as np


def _cover(dist: np.ndarray) -> np.ndarray:
    """Signed distance (pixels, negative inside) -> coverage."""
    return np.clip(0.5 - dist, 0.0, 1.0)


def ellipse(X: np.ndarray, Y: np.ndarray, cx, cy, rx, ry) -> np.ndarray:
    """Filled axis-aligned ellipse; parameters broadcast to (N, 1, 1)."""
    u = (X - cx) / rx
    v = (Y - cy) / ry
    r = np.sqrt(u * u + v * v)
    return _cover((r - 1.0) * np.minimum(rx, ry))


def capsule(X: np.ndarray, Y: np.ndarray, ax, ay, bx, by, radius) -> np.ndarray:
    """Filled segment A-B with round caps."""
    px, py = X - ax, Y - ay
    dx, dy = bx - ax, by - ay
    h = np.clip((px * dx + py * dy) / np.maximum(dx * dx + dy * dy, 1e-6), 0.0, 1.0)
    ex, ey = px - dx * h, py - dy * h
    return _cover(np.sqrt(ex * ex + ey * ey) - radius)


def bar(X: np.ndarray, Y: np.ndarray, cx, cy, half_len, half_thick, angle) -> np.ndarray:
    """Filled rotated rectangle centred at (cx, cy); angle in radians, positive turns clockwise on screen."""
    c, s = np.cos(angle), np.sin(angle)
    u = (X - cx) * c + (Y - cy) * s
    v = -(X - cx) * s + (Y - cy) * c
    d = np.maximum(np.abs(u) - half_len, np.abs(v) - half_thick)
    return _cover(d)


def arc(X: np.ndarray, Y: np.ndarray, cx, cy, half_width, bend, half_thick) -> np.ndarray:
    """A parabolic stroke y = cy + bend * (1 - (dx / half_width)^2): bend > 0 smiles, < 0 frowns."""
    dx = X - cx
    yline = cy + bend * (1.0 - (dx / half_width) ** 2)
    d = np.maximum(np.abs(Y - yline) - half_thick, np.abs(dx) - half_width)
    return _cover(d)


def paint(canvas: np.ndarray, cover: np.ndarray, color: np.ndarray) -> None:
    """Alpha-composite colour (N, 3) or (3,) over canvas (N, H, W, 3) in place.

    Only covered pixels are touched: most primitives cover a few percent of the crop, so the sparse
    update is several times faster than blending the whole canvas.
    """
    idx = np.flatnonzero(cover)
    alpha = cover.reshape(-1)[idx, None]
    flat = canvas.reshape(-1, 3)
    col = color[idx // (cover.shape[1] * cover.shape[2])] if color.ndim == 2 else color
    flat[idx] += alpha * (col - flat[idx])
