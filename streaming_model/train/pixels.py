"""Which pixels of rendered frames carry what the loss weighs up: the character (and the ball it handles),
and its eyes and mouth, under any light and in front of any scenery."""

from __future__ import annotations

import numpy as np

from ..world import palette as P
from ..world.render import _BACKGROUND


def character_pixels(frames: np.ndarray, scenery: np.ndarray | None = None) -> np.ndarray:
    """(..., H, W, 3) uint8 -> (..., H, W) bool: where the frame differs from its scene drawn without the
    character and the ball (``scenery``, ``render_scenery``), else from today's background."""
    back = (_BACKGROUND if scenery is None else scenery).astype(np.int16)
    return np.abs(frames.astype(np.int16) - back).sum(-1) > 30


def face_pixels(frames: np.ndarray, light: np.ndarray | None = None) -> np.ndarray:
    """(..., H, W, 3) uint8 -> (..., H, W) bool: the eyes' white and the mouth. ``light``: each frame's light
    (..., 3), divided out first so the face's colours are found at dusk and at night."""
    f = frames.astype(np.float32)
    if light is not None:
        f = f / np.maximum(light[..., None, None, :], 0.05)
    near = [np.abs(f - c).sum(-1) < 60 for c in (P.EYE_WHITE, P.MOUTH_OPEN, P.MOUTH_LINE)]
    return near[0] | near[1] | near[2]
