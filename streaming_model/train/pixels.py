"""Which pixels of rendered frames carry what the loss weighs up: the character (and the ball it handles),
and its eyes and mouth, under any light and in front of any scenery."""

from __future__ import annotations

import numpy as np

from ..masks import channel_sum, near
from ..scene_probes import normalise
from ..world import palette as P
from ..world.render import _BACKGROUND


def character_pixels(frames: np.ndarray, scenery: np.ndarray | None = None) -> np.ndarray:
    """(..., H, W, 3) uint8 -> (..., H, W) bool: where the frame differs from its scene drawn without the
    character and the ball (``scenery``, ``render_scenery``), else from today's background."""
    back = (_BACKGROUND if scenery is None else scenery).astype(np.int16)
    return channel_sum(np.abs(frames.astype(np.int16) - back)) > 30


def face_pixels(frames: np.ndarray, light: np.ndarray | None = None) -> np.ndarray:
    """(..., H, W, 3) uint8 -> (..., H, W) bool: the eyes' white and the mouth. ``light``: each frame's light
    (..., 3), divided out first so the face's colours are found at dusk and at night."""
    f = frames.astype(np.float32)
    if light is not None:
        f = normalise(f, light)
    eyes, mouth_open, mouth_line = (near(f, c, 60.0) for c in (P.EYE_WHITE, P.MOUTH_OPEN, P.MOUTH_LINE))
    return eyes | mouth_open | mouth_line
