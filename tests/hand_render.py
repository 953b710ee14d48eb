"""A shaded picture of a hand drawn from its 21 landmarks in 3D (``tests.hands``), for camera footage.

No registry package we reach ships footage of hands, so the camera tests draw them: each finger bone a
capsule tapering towards the tip, the palm a rounded slab through the wrist and the knuckles, the forearm a
capsule down to the picture's edge, all in skin tones with diffuse and a little specular light, depth-sorted
per pixel. Coordinates are in picture widths: x right in 0..1, y down in 0..height/width, z (towards the viewer
negative) in the same unit, so that a circle stays round in a picture that is not square.
"""

from __future__ import annotations

import numpy as np

SKIN = np.array([0.86, 0.64, 0.52])
"""Linear-ish RGB of the skin's lit colour."""
_LIGHT = np.array([-0.35, -0.55, -0.76])  # towards the light: up left, in front
_LIGHT = _LIGHT / np.linalg.norm(_LIGHT)
_HALF = _LIGHT + np.array([0.0, 0.0, -1.0])  # halfway between the light and the viewer, for the highlight
_HALF = _HALF / np.linalg.norm(_HALF)

# Bones as (from, to, radius at from, radius at to), radii in palm lengths (wrist to middle MCP).
_BONES: list[tuple[int, int, float, float]] = [
    (1, 2, 0.19, 0.15),
    (2, 3, 0.15, 0.13),
    (3, 4, 0.13, 0.11),
]
# Wide enough that neighbouring fingers touch, as a real hand's do.
for _mcp, _r in ((5, 0.125), (9, 0.13), (13, 0.12), (17, 0.1)):
    _BONES += [
        (_mcp, _mcp + 1, _r, _r * 0.92),
        (_mcp + 1, _mcp + 2, _r * 0.92, _r * 0.84),
        (_mcp + 2, _mcp + 3, _r * 0.84, _r * 0.74),
    ]
_PALM = (0, 1, 5, 9, 13, 17)
_PALM_THICKNESS = 0.22


class Canvas:
    """An RGB picture (floats 0..1) with a depth buffer: nearer (smaller z) surfaces win."""

    def __init__(self, rgb: np.ndarray) -> None:
        self.rgb = rgb.astype(np.float64, copy=True)
        self.h, self.w = rgb.shape[:2]
        self.depth = np.full((self.h, self.w), np.inf)
        ys, xs = np.mgrid[0 : self.h, 0 : self.w]
        self._px = (xs + 0.5) / self.w  # pixel centres in picture units (x in 0..1, y in 0..h/w)
        self._py = (ys + 0.5) / self.w

    def _box(self, lo: np.ndarray, hi: np.ndarray) -> tuple[slice, slice] | None:
        x0, y0 = max(0, int(lo[0] * self.w) - 1), max(0, int(lo[1] * self.w) - 1)
        x1, y1 = min(self.w, int(hi[0] * self.w) + 2), min(self.h, int(hi[1] * self.w) + 2)
        return None if x0 >= x1 or y0 >= y1 else (slice(y0, y1), slice(x0, x1))

    def _paint(self, box: tuple[slice, slice], inside: np.ndarray, z: np.ndarray, normal: np.ndarray) -> None:
        nearer = inside & (z < self.depth[box])
        shade = np.clip(normal @ _LIGHT, 0.0, 1.0)
        specular = np.clip(normal @ _HALF, 0.0, 1.0) ** 24
        colour = SKIN * (0.4 + 0.65 * shade[..., None]) + 0.1 * specular[..., None]
        region = self.rgb[box]
        region[nearer] = np.clip(colour[nearer], 0.0, 1.0)
        self.depth[box][nearer] = z[nearer]

    def capsule(self, a: np.ndarray, b: np.ndarray, ra: float, rb: float) -> None:
        """A tapered capsule from ``a`` to ``b`` (3D points), radii ``ra`` and ``rb``."""
        a2, b2 = a[:2], b[:2]
        r = max(ra, rb)
        box = self._box(np.minimum(a2, b2) - r, np.maximum(a2, b2) + r)
        if box is None:
            return
        px, py = self._px[box], self._py[box]
        ab = b2 - a2
        length2 = float(ab @ ab) or 1e-12
        t = np.clip(((px - a2[0]) * ab[0] + (py - a2[1]) * ab[1]) / length2, 0.0, 1.0)
        dx, dy = px - (a2[0] + t * ab[0]), py - (a2[1] + t * ab[1])
        radius = ra + t * (rb - ra)
        d2 = dx * dx + dy * dy
        inside = d2 < radius * radius
        bulge = np.sqrt(np.clip(radius * radius - d2, 0.0, None))
        z = a[2] + t * (b[2] - a[2]) - bulge
        normal = np.stack([dx, dy, -bulge], axis=-1) / radius[..., None]
        self._paint(box, inside, z, normal)

    def slab(self, corners: np.ndarray, thickness: float) -> None:
        """A convex polygon of 3D ``corners`` (in order), rounded over ``thickness`` at its rim."""
        xy = corners[:, :2]
        box = self._box(xy.min(axis=0), xy.max(axis=0))
        if box is None:
            return
        px, py = self._px[box], self._py[box]
        # Signed distance to the convex polygon (negative inside), from its edges' half-planes.
        centre = xy.mean(axis=0)
        dist = np.full(px.shape, -np.inf)
        for p, q in zip(xy, np.roll(xy, -1, axis=0), strict=True):
            edge = q - p
            outward = np.array([edge[1], -edge[0]]) / (np.linalg.norm(edge) or 1e-12)
            if outward @ (centre - p) > 0:
                outward = -outward
            dist = np.maximum(dist, (px - p[0]) * outward[0] + (py - p[1]) * outward[1])
        inside = dist < 0
        rim = np.clip(-dist / thickness, 0.0, 1.0)
        # The slab's plane through the corners (least squares), then the rim curving away from the viewer.
        coef, *_ = np.linalg.lstsq(np.c_[xy, np.ones(len(xy))], corners[:, 2], rcond=None)
        flat = coef[0] * px + coef[1] * py + coef[2]
        bulge = thickness * np.sqrt(np.clip(1.0 - (1.0 - rim) ** 2, 0.0, 1.0))
        z = flat - bulge
        # The surface z = f(x, y) faces the viewer (-z) along (df/dx, df/dy, -1).
        dzdy, dzdx = np.gradient(z, 1.0 / self.w) if min(z.shape) > 1 else (0.0 * z, 0.0 * z)
        normal = np.stack([dzdx, dzdy, -np.ones(px.shape)], axis=-1)
        normal = normal / np.linalg.norm(normal, axis=-1, keepdims=True)
        self._paint(box, inside, z, normal)


def draw_hand(canvas: Canvas, landmarks: np.ndarray, arm_to: tuple[float, float] | None = (0.0, 1.2)) -> None:
    """Draw a hand whose joints are ``landmarks`` (21, 3) in picture widths onto ``canvas``.

    ``arm_to``: where the forearm ends, as (dx, y) in picture widths (the wrist's x plus dx, and a y below
    the picture), or None for no forearm.
    """
    pts = landmarks.astype(np.float64)
    size = float(np.linalg.norm(pts[9, :2] - pts[0, :2])) or 1e-6
    for i, j, ri, rj in _BONES:
        canvas.capsule(pts[i], pts[j], ri * size, rj * size)
    palm = pts[list(_PALM)]
    centre = palm.mean(axis=0)
    # The joints are the palm's bones; its flesh reaches past them, a little beyond the knuckles and sides.
    canvas.slab(centre + 1.15 * (palm - centre), _PALM_THICKNESS * size)
    behind = np.array([0.0, 0.0, 0.1 * size])
    canvas.capsule(pts[0] + behind, pts[2] + behind, 0.24 * size, 0.15 * size)  # the ball of the thumb
    if arm_to is not None:
        # Behind the palm, so that the palm's edge shows where they meet.
        start = pts[0] + [0.0, 0.05 * size, 0.35 * size]
        end = np.array([pts[0, 0] + arm_to[0], arm_to[1], pts[0, 2] + 0.6 * size])
        canvas.capsule(start, end, 0.3 * size, 0.4 * size)
