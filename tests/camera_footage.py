"""Camera footage for the gesture tests: a person on a video call who waves, gives a thumbs up, points,
raises a hand, nods and shakes their head, written as a Y4M file for Chromium's fake camera.

No package on the registries we reach (PyPI, npm, Debian) ships footage of hands or of head gestures that
we found, so this is made, as honestly as we can: the person is a real photograph (scikit-image's
``astronaut.png``, NASA's portrait of Eileen Collins, public domain), whose face is moved as a head moves
in a nod (up and down) and a shake (side to side, the middle of the face swinging past its edges); the hand
is drawn (tests/hand_render.py) from the 3D hand of tests/hands.py, posed and moved as a person does.
The hand and face models that read it are the real ones, in the real page.

Each frame carries its index in a strip of black and white squares at the bottom left (``MARK_BITS``
bits), so that a test can tell which frame of the footage the page was looking at.
"""

from __future__ import annotations

import importlib.resources
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image
from scipy import ndimage

from tests import hands
from tests.hand_render import Canvas, draw_hand

WIDTH, HEIGHT, FPS = 320, 240, 15
MARK_BITS, MARK_PX = 10, 6
FACE = (140.0, 78.0)
"""The nose of the photograph's face in the footage's pixels."""
EYES_PX = 31.0
"""The distance between the photograph's eyes in the footage's pixels."""
HAND_X, HAND_Y, HAND_SIZE = 0.72, 0.47, 0.2
"""Where the hand's wrist is, in picture widths, and its palm length."""


@dataclass(frozen=True)
class Segment:
    """``seconds`` of footage showing ``what``: a gesture's name, ``still`` (face only) or a non-gesture."""

    what: str
    seconds: float


GESTURES = (
    Segment("still", 2.0),
    Segment("wave", 2.4),
    Segment("still", 1.6),
    Segment("thumbs_up", 1.6),
    Segment("still", 1.6),
    Segment("point", 1.6),
    Segment("still", 1.6),
    Segment("raise_hand", 2.0),
    Segment("still", 1.6),
    Segment("nod", 2.0),
    Segment("still", 1.6),
    Segment("shake_head", 2.0),
    Segment("still", 1.6),
)
"""The gestures' footage: each gesture once, with the face alone between them."""

NO_GESTURES = (
    Segment("still", 4.0),
    Segment("relaxed_hand", 5.0),
    Segment("talking", 6.0),
    Segment("fist_across", 4.0),
    Segment("still", 3.0),
    Segment("chin_scratch", 4.0),
    Segment("talking", 4.0),
)
"""Footage without any gesture: a still face, a talking head, a hand that moves without meaning anything."""

THUMB_UP_FRONT = hands.Pose(curls=(1, 1, 1, 1), thumb_extended=True, thumb_direction_deg=-25.0)
"""A fist seen from the palm's side, the thumb up and a little out. (``tests.hands.THUMBS_UP``, the fist
turned on its side, is drawn too crudely for the hand model to read.)"""

ENTER_S = 0.3
"""A hand takes this long to come up into the picture (and to go down out of it)."""


def onsets(script: tuple[Segment, ...]) -> list[tuple[str, float]]:
    """(gesture, second of the footage at which it is fully shown) for each gesture in ``script``."""
    out, t = [], 0.0
    for segment in script:
        if segment.what in ("wave", "thumbs_up", "point", "raise_hand"):
            out.append((segment.what, t + ENTER_S))
        elif segment.what in ("nod", "shake_head"):
            out.append((segment.what, t))
        t += segment.seconds
    return out


def duration_s(script: tuple[Segment, ...]) -> float:
    return sum(s.seconds for s in script)


def _photo() -> np.ndarray:
    """The person: the photograph's top three quarters, scaled to the footage, RGB floats 0..1."""
    path = importlib.resources.files("skimage") / "data" / "astronaut.png"
    with importlib.resources.as_file(path) as file, Image.open(file) as image:
        crop = image.convert("RGB").crop((0, 0, 512, 384)).resize((WIDTH, HEIGHT), Image.Resampling.LANCZOS)
        return np.asarray(crop, dtype=np.float64) / 255.0


class _Head:
    """Moves the photograph's face by a smooth field that is whole at the nose and fades out past the
    head, so the face turns and nods against a still body and background."""

    def __init__(self, photo: np.ndarray) -> None:
        self.photo = photo
        ys, xs = np.mgrid[0:HEIGHT, 0:WIDTH].astype(np.float64)
        self.ys, self.xs = ys, xs
        d2 = ((xs - FACE[0]) / (1.7 * EYES_PX)) ** 2 + ((ys - FACE[1]) / (2.2 * EYES_PX)) ** 2
        self.weight = np.exp(-d2)  # 1 at the nose, fading over the head

    def frame(self, dx: float, dy: float) -> np.ndarray:
        """The photograph with the face moved by (dx, dy) pixels at the nose."""
        if dx == 0.0 and dy == 0.0:
            return self.photo.copy()
        coords = [self.ys - dy * self.weight, self.xs - dx * self.weight]
        return np.stack(
            [ndimage.map_coordinates(self.photo[..., c], coords, order=1, mode="nearest") for c in range(3)],
            axis=-1,
        )


def _head_motion(what: str, t: float) -> tuple[float, float]:
    """The nose's displacement in pixels at ``t`` seconds into a segment showing ``what``."""
    breathing = (0.8 * np.sin(2 * np.pi * 0.3 * t), 0.6 * np.sin(2 * np.pi * 0.23 * t + 1.0))
    if what == "nod":
        return breathing[0], 0.28 * EYES_PX * np.sin(2 * np.pi * 1.8 * t)
    if what == "shake_head":
        return 0.32 * EYES_PX * np.sin(2 * np.pi * 1.6 * t), breathing[1]
    if what == "talking":  # small quick bobs and turns: what a head does while its owner speaks
        return (
            0.05 * EYES_PX * np.sin(2 * np.pi * 2.7 * t) + 0.06 * EYES_PX * np.sin(2 * np.pi * 0.5 * t),
            0.05 * EYES_PX * np.sin(2 * np.pi * 3.1 * t + 0.5) + 0.04 * EYES_PX * np.sin(2 * np.pi * 0.7 * t),
        )
    return breathing


def _hand_pose(what: str, t: float, seconds: float) -> np.ndarray | None:
    """The hand's 21 joints (picture widths) at ``t`` seconds into a segment, or None when out of sight.
    The hand faces the camera; a thumbs up is a fist with the thumb up beside it."""
    rise = min(1.0, t / ENTER_S, (seconds - t) / ENTER_S)
    if rise <= 0.0:
        return None
    y = HAND_Y + (1.0 - rise) * 0.55  # coming up from below the picture
    x, roll, pose = HAND_X, 0.0, hands.OPEN
    if what == "wave":
        x += 0.07 * np.sin(2 * np.pi * 2.0 * t)
        roll = -18.0 * np.sin(2 * np.pi * 2.0 * t)  # the fingers swing further than the wrist
    elif what == "thumbs_up":
        pose = THUMB_UP_FRONT
    elif what == "point":
        pose = hands.POINT
    elif what == "relaxed_hand":  # half-curled, drifting up and down
        pose = hands.Pose(curls=(0.55, 0.6, 0.65, 0.7), thumb_extended=False)
        y += 0.04 * np.sin(2 * np.pi * 0.4 * t)
    elif what == "fist_across":
        pose = hands.FIST
        x = 0.85 - 0.3 * t / seconds
    elif what == "chin_scratch":  # curled fingers near the chin, small quick strokes
        pose = hands.Pose(curls=(0.45, 0.8, 0.85, 0.9), thumb_extended=False)
        x, y, roll = 0.5 + 0.012 * np.sin(2 * np.pi * 3.0 * t), 0.36, -30.0
    elif what != "raise_hand":
        return None
    shape: dict[str, Any] = {**pose}
    shape["roll_deg"] = shape.get("roll_deg", 0.0) + roll
    return hands.hand(**shape, x=x, y=y, size=HAND_SIZE)


def _mark(rgb: np.ndarray, index: int) -> None:
    """Write ``index`` into the frame as ``MARK_BITS`` squares, most significant first."""
    top = HEIGHT - MARK_PX
    rgb[top - 2 :, : MARK_BITS * MARK_PX + 2] = 0.0
    for bit in range(MARK_BITS):
        if index >> (MARK_BITS - 1 - bit) & 1:
            rgb[top:, 1 + bit * MARK_PX : 1 + (bit + 1) * MARK_PX] = 1.0


def frames(script: tuple[Segment, ...]) -> Iterator[np.ndarray]:
    """The footage of ``script``, frame by frame, as RGB uint8 arrays."""
    head = _Head(_photo())
    index = 0
    for segment in script:
        for i in range(round(segment.seconds * FPS)):
            t = i / FPS
            canvas = Canvas(head.frame(*_head_motion(segment.what, t)))
            joints = _hand_pose(segment.what, t, segment.seconds)
            if joints is not None:
                draw_hand(canvas, joints)
            rgb = canvas.rgb
            _mark(rgb, index)
            yield (np.clip(rgb, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)
            index += 1


def write_y4m(path: Path, script: tuple[Segment, ...]) -> Path:
    """``script``'s footage as a Y4M file (4:2:0, full-range BT.601), as Chromium's fake camera reads it."""
    with path.open("wb") as out:
        out.write(f"YUV4MPEG2 W{WIDTH} H{HEIGHT} F{FPS}:1 Ip A1:1 C420jpeg\n".encode())
        for rgb in frames(script):
            r, g, b = (rgb[..., c].astype(np.float64) for c in range(3))
            y = 0.299 * r + 0.587 * g + 0.114 * b
            u = -0.168736 * r - 0.331264 * g + 0.5 * b + 128.0
            v = 0.5 * r - 0.418688 * g - 0.081312 * b + 128.0
            out.write(b"FRAME\n")
            for plane, sub in ((y, False), (u, True), (v, True)):
                if sub:
                    plane = plane.reshape(HEIGHT // 2, 2, WIDTH // 2, 2).mean(axis=(1, 3))
                out.write((np.clip(plane, 0.0, 255.0) + 0.5).astype(np.uint8).tobytes())
    return path


def mark_samples() -> tuple[int, list[int]]:
    """Where the frame index is in a frame scaled to ``WIDTH`` x ``HEIGHT``: the row, and the column of each
    bit's square, most significant first (a square brighter than mid-grey is a 1)."""
    return HEIGHT - MARK_PX // 2, [1 + bit * MARK_PX + MARK_PX // 2 for bit in range(MARK_BITS)]
