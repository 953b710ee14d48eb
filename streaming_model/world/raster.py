"""Vectorised soft-edged 2D primitives over a batch of frames.

Every primitive returns its coverage in [0, 1] over the window of the crops where it can be non-zero (a
`Cover`); edges are anti-aliased over about one pixel so that the codec sees smooth images and small motions
change pixels continuously. Outside its window a primitive's coverage is exactly 0, so computing only the
window gives the same pixels, to the bit, as computing every pixel (most primitives cover a few percent of a
crop, and the window is what makes rendering cheap).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

_MARGIN = 1.0
"""Pixels added around each window's bound, so that rounding at its edge cannot cut off coverage."""


class Grid(NamedTuple):
    """Pixel centres of a batch of crops: columns per world (each crop sits at its own place), rows shared."""

    x: np.ndarray  # (N, W)
    y: np.ndarray  # (H,)


class Cover(NamedTuple):
    """A primitive's coverage (N, h, w) over rows x cols of the crops; zero everywhere else."""

    alpha: np.ndarray
    rows: slice
    cols: slice

    def masked(self, keep: np.ndarray) -> Cover:
        """The coverage in the worlds where ``keep`` (N, 1, 1) holds, zero in the others."""
        return Cover(self.alpha * keep, self.rows, self.cols)


def span(centres: np.ndarray, lo, hi) -> slice:
    """The indices along one axis whose pixel centres (N, L), or (1, L) shared, lie within [lo, hi] (per
    world, broadcast from (N, 1, 1), (N,) or a scalar) in any world, a pixel of margin around, as one
    slice: the window outside which something drawn within those bounds covers nothing."""
    lo, hi = np.reshape(lo, (-1, 1)), np.reshape(hi, (-1, 1))
    hit = np.flatnonzero(((centres >= lo - _MARGIN) & (centres <= hi + _MARGIN)).any(0))
    return slice(int(hit[0]), int(hit[-1]) + 1) if hit.size else slice(0, 0)


def _covered(grid: Grid, bounds: tuple, alpha: Callable[..., np.ndarray], *params) -> Cover:
    """``alpha(X, Y, *params)`` over the rows and columns of the crops within ``bounds`` (x0, x1, y0, y1),
    computed at their pixel centres X (N, 1, w) and Y (1, h, 1)."""
    x0, x1, y0, y1 = bounds
    rows, cols = span(grid.y[None, :], y0, y1), span(grid.x, x0, x1)
    return Cover(alpha(grid.x[:, None, cols], grid.y[None, rows, None], *params), rows, cols)


def _cover(dist: np.ndarray) -> np.ndarray:
    """Signed distance (pixels, negative inside) -> coverage."""
    return np.clip(0.5 - dist, 0.0, 1.0)


def ellipse(grid: Grid, cx, cy, rx, ry) -> Cover:
    """Filled axis-aligned ellipse; parameters broadcast to (N, 1, 1)."""
    # Non-zero only where (r - 1) * min(rx, ry) < 0.5, so within 1 + 0.5 / min(rx, ry) radii of the centre.
    reach = 1.0 + 0.5 / np.minimum(rx, ry)
    bounds = (cx - rx * reach, cx + rx * reach, cy - ry * reach, cy + ry * reach)
    return _covered(grid, bounds, ellipse_alpha, cx, cy, rx, ry)


def ellipse_alpha(X: np.ndarray, Y: np.ndarray, cx, cy, rx, ry) -> np.ndarray:
    """An ellipse's coverage at the pixel centres X, Y."""
    u = (X - cx) / rx
    v = (Y - cy) / ry
    r = np.sqrt(u * u + v * v)
    return _cover((r - 1.0) * np.minimum(rx, ry))


def capsule(grid: Grid, ax, ay, bx, by, radius) -> Cover:
    """Filled segment A-B with round caps."""
    reach = radius + 0.5
    bounds = (
        np.minimum(ax, bx) - reach,
        np.maximum(ax, bx) + reach,
        np.minimum(ay, by) - reach,
        np.maximum(ay, by) + reach,
    )
    return _covered(grid, bounds, capsule_alpha, ax, ay, bx, by, radius)


def capsule_alpha(X: np.ndarray, Y: np.ndarray, ax, ay, bx, by, radius) -> np.ndarray:
    """A capsule's coverage at the pixel centres X, Y."""
    px, py = X - ax, Y - ay
    dx, dy = bx - ax, by - ay
    h = np.clip((px * dx + py * dy) / np.maximum(dx * dx + dy * dy, 1e-6), 0.0, 1.0)
    ex, ey = px - dx * h, py - dy * h
    return _cover(np.sqrt(ex * ex + ey * ey) - radius)


def bar(grid: Grid, cx, cy, half_len, half_thick, angle) -> Cover:
    """Filled rotated rectangle centred at (cx, cy); angle in radians, positive turns clockwise on screen."""
    reach = np.hypot(half_len + 0.5, half_thick + 0.5)  # its corners, at any angle
    bounds = (cx - reach, cx + reach, cy - reach, cy + reach)
    return _covered(grid, bounds, bar_alpha, cx, cy, half_len, half_thick, angle)


def bar_alpha(X: np.ndarray, Y: np.ndarray, cx, cy, half_len, half_thick, angle) -> np.ndarray:
    """A bar's coverage at the pixel centres X, Y."""
    c, s = np.cos(angle), np.sin(angle)
    u = (X - cx) * c + (Y - cy) * s
    v = -(X - cx) * s + (Y - cy) * c
    return _cover(np.maximum(np.abs(u) - half_len, np.abs(v) - half_thick))


def arc(grid: Grid, cx, cy, half_width, bend, half_thick) -> Cover:
    """A parabolic stroke y = cy + bend * (1 - (dx / half_width)^2): bend > 0 smiles, < 0 frowns."""
    reach_x = half_width + 0.5
    # Within reach_x the line keeps within |bend| * sag of cy, sag its overshoot past the stroke's ends.
    reach_y = np.abs(bend) * (reach_x / half_width) ** 2 + half_thick + 0.5
    bounds = (cx - reach_x, cx + reach_x, cy - reach_y, cy + reach_y)
    return _covered(grid, bounds, arc_alpha, cx, cy, half_width, bend, half_thick)


def arc_alpha(X: np.ndarray, Y: np.ndarray, cx, cy, half_width, bend, half_thick) -> np.ndarray:
    """An arc's coverage at the pixel centres X, Y."""
    dx = X - cx
    yline = cy + bend * (1.0 - (dx / half_width) ** 2)
    return _cover(np.maximum(np.abs(Y - yline) - half_thick, np.abs(dx) - half_width))


def paint(canvas: np.ndarray, cover: Cover, color: np.ndarray) -> None:
    """Alpha-composite colour (N, 3) or (3,) over canvas (N, H, W, 3) in place, within the cover's window
    (uncovered pixels there are left as they are: x + 0 * (c - x) is x)."""
    col = color[:, None, None] if color.ndim == 2 else color
    sub = canvas[:, cover.rows, cover.cols]
    sub += cover.alpha[..., None] * (col - sub)
