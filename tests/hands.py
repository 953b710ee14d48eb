"""Synthetic MediaPipe-style hand landmarks (21 points) from a small 3D hand model, for gesture tests.

The hand is built palm towards the camera with the fingers up, each finger a chain of three segments that
curl towards the camera, then rotated, scaled and placed in the image (x right, y down, both 0..1) and
projected orthographically. Jitter imitates a landmark tracker's noise.
"""

from __future__ import annotations

from typing import Any, TypedDict

import numpy as np

# (MCP position in palm lengths, segment lengths) for index, middle, ring, pinky.
_FINGERS = [
    ((-0.30, 0.98), (0.42, 0.26, 0.21)),
    ((-0.10, 1.00), (0.46, 0.29, 0.22)),
    ((0.10, 0.96), (0.43, 0.27, 0.21)),
    ((0.28, 0.86), (0.34, 0.21, 0.19)),
]
_THUMB_CMC = (-0.22, 0.22)
_THUMB_SEGMENTS = (0.33, 0.30, 0.26)
_CURL_ANGLES = np.radians([90.0, 100.0, 70.0])


def _chain(base: tuple[float, float], lengths, curl: float) -> list[np.ndarray]:
    """Joints of a finger rooted at ``base``: straight up at curl 0, folded into the palm at curl 1."""
    points, pos, theta = [], np.array([base[0], base[1], 0.0]), 0.0
    points.append(pos.copy())
    for length, angle in zip(lengths, _CURL_ANGLES, strict=True):
        theta += curl * angle
        pos = pos + length * np.array([0.0, np.cos(theta), -np.sin(theta)])
        points.append(pos.copy())
    return points


def _thumb(direction_deg: float, extended: bool) -> list[np.ndarray]:
    """Thumb joints: extended along ``direction_deg`` (0 = up, -90 = away from the fingers), else across."""
    points, pos = [], np.array([*_THUMB_CMC, 0.0])
    points.append(pos.copy())
    if extended:
        a = np.radians(direction_deg)
        step = np.array([np.sin(a), np.cos(a), 0.0])
        for length in _THUMB_SEGMENTS:
            pos = pos + length * step
            points.append(pos.copy())
    else:
        for length, d in zip(_THUMB_SEGMENTS, ((0.4, 0.7), (0.8, 0.1), (0.6, -0.4)), strict=True):
            pos = pos + length * np.array([d[0], d[1], -0.3])
            points.append(pos.copy())
    return points


def hand(
    curls: tuple[float, float, float, float] = (0, 0, 0, 0),
    thumb_extended: bool = True,
    thumb_direction_deg: float = -50.0,
    x: float = 0.5,
    y: float = 0.5,
    size: float = 0.12,
    roll_deg: float = 0.0,
) -> np.ndarray:
    """One hand as (21, 3) landmarks. ``size`` is the palm length (wrist to middle MCP) in image units."""
    local = [np.zeros(3)]
    local += _thumb(thumb_direction_deg, thumb_extended)
    for (base, lengths), curl in zip(_FINGERS, curls, strict=True):
        local += _chain(base, lengths, curl)
    pts = np.array(local)
    r = np.radians(roll_deg)
    rot = np.array([[np.cos(r), -np.sin(r)], [np.sin(r), np.cos(r)]])
    xy = pts[:, :2] @ rot.T
    out = np.empty((21, 3))
    out[:, 0] = x + size * xy[:, 0]
    out[:, 1] = y - size * xy[:, 1]  # image y grows downwards
    out[:, 2] = size * pts[:, 2]
    return out


class Pose(TypedDict, total=False):
    """The shape of a hand: arguments of ``hand``."""

    curls: tuple[float, float, float, float]
    thumb_extended: bool
    thumb_direction_deg: float
    roll_deg: float


OPEN = Pose(curls=(0, 0, 0, 0), thumb_extended=True)
FIST = Pose(curls=(1, 1, 1, 1), thumb_extended=False)
POINT = Pose(curls=(0, 1, 1, 1), thumb_extended=False)
# Seen from the side: the fist turned a quarter so the fingers lie flat and the thumb points up.
THUMBS_UP = Pose(curls=(1, 1, 1, 1), thumb_extended=True, thumb_direction_deg=-90.0, roll_deg=-90.0)


def sequence(
    pose: Pose,
    seconds: float,
    fps: float = 30.0,
    sway_x: float = 0.0,
    sway_hz: float = 2.0,
    drift_x: float = 0.0,
    jitter: float = 0.002,
    seed: int = 0,
    start_ms: float = 0.0,
    **place: Any,
) -> list[tuple[np.ndarray, float]]:
    """Frames of ``pose`` over ``seconds``: (landmarks, t_ms). ``sway_x`` swings it (a wave's amplitude)."""
    rng = np.random.default_rng(seed)
    frames = []
    args: dict[str, Any] = {**pose, **place}
    base_x, base_roll = args.pop("x", 0.5), args.pop("roll_deg", 0.0)
    for i in range(round(seconds * fps)):
        t = i / fps
        x = base_x + sway_x * np.sin(2 * np.pi * sway_hz * t) + drift_x * t
        roll = base_roll + (15.0 * np.sin(2 * np.pi * sway_hz * t) if sway_x else 0.0)
        pts = hand(**args, x=x, roll_deg=roll)
        frames.append((pts + rng.normal(0.0, jitter, pts.shape), start_ms + 1000.0 * t))
    return frames
