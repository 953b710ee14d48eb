"""Drawing the scene (world/scene.py): weather, lamp and door behind the character, the ball and the
lamp's glow in front. Only worlds whose scene differs from today's take this path, so today's world is
drawn exactly as before.

Objects are hard-edged (whole pixels) and come and go by rising from the floor and sinking back, never as
blends, so that the probes can tell them from the character in every frame; rain and snow are a falling
texture whose density follows the weather's strength.
"""

from __future__ import annotations

import numpy as np

from ..manifest import FRAME_SIZE
from . import palette as P
from .raster import span
from .scene import (
    BALL_R,
    BULB,
    DOOR_LEFT,
    DOOR_RIGHT,
    DOOR_TOP,
    LAMP_HEAD_BOTTOM,
    LAMP_LEFT,
    LAMP_RIGHT,
    LAMP_TOP,
    LEAF_LEFT,
    LEAF_OPEN_W,
    LEAF_RIGHT,
    LEAF_TOP,
    POST_LEFT,
    POST_RIGHT,
)

FLOOR_ROW = 108
"""The first row of the floor (the renderer's ``FLOOR_Y``): the scene stands on it, the weather stops
there."""
PERIOD = 96  # rows before the falling texture repeats
RAIN_SPEED, SNOW_SPEED = 3.0, 1.0  # rows per frame
RAIN_ALPHA, SNOW_ALPHA = 0.8, 1.0

_COLS = np.arange(FRAME_SIZE)
_ROWS = np.arange(FRAME_SIZE)

LAMP_RECTS = (
    (LAMP_TOP, LAMP_HEAD_BOTTOM, LAMP_LEFT, LAMP_RIGHT),
    (LAMP_HEAD_BOTTOM + 1, FLOOR_ROW - 1, POST_LEFT, POST_RIGHT),
)
"""The lamp's head and post: rows and columns, inclusive."""
DOOR_RECT = (DOOR_TOP, FLOOR_ROW - 1, DOOR_LEFT, DOOR_RIGHT)
"""The door's frame (its leaf and doorway inside it): rows and columns, inclusive."""


def _texture(seed: int, cell: tuple[int, int], length: int, width: int) -> np.ndarray:
    """(PERIOD, 128): for each pixel the draw (in [0, 1)) of the streak or flake covering it, 2 where
    none does; a weather of strength w shows the marks whose draw is below w."""
    rng = np.random.default_rng(seed)
    tex = np.full((PERIOD, FRAME_SIZE), 2.0, np.float32)
    for r in range(0, PERIOD, cell[0]):
        for c in range(0, FRAME_SIZE, cell[1]):
            r0, c0 = r + int(rng.integers(cell[0])), c + int(rng.integers(cell[1] - width + 1))
            rows = np.arange(r0, r0 + length) % PERIOD
            tex[rows[:, None], (np.arange(c0, c0 + width) % FRAME_SIZE)[None, :]] = rng.random()
    return tex


# Marks at the codec's scale (a latent cell is 8 x 8 pixels over 4 frames): streaks of 2 x 14 and flakes of
# 4 x 4, sparse and slow. Finer ones (1 x 7 at 5 rows a frame, 2 x 2 flakes) read as a tinted sky through
# every codec tried, the shipped one and one whose encoder was trained on them too.
RAIN_TEX = _texture(7, (24, 16), 14, 2)
SNOW_TEX = _texture(11, (20, 20), 4, 4)
REVEAL = np.broadcast_to(((FLOOR_ROW - 1 - _ROWS) / FLOOR_ROW)[:, None], (FRAME_SIZE, FRAME_SIZE)).astype(
    np.float32
)
"""The order in which an object's pixels appear as it comes (a pixel shows once its value is below the
object's presence): it rises from the floor, row by row, and sinks back into it as it goes; a clean edge,
where a pixel-by-pixel dissolve would be noise to a coded frame."""


def is_scenic(s) -> bool:
    """Does any world of the batch show anything of the scene (else today's drawing is exact)?"""
    parts = (s.lamp_show, s.rain, s.snow, s.door_show, s.ball_show)
    return bool(any(p.any() for p in parts) or (s.light != 1.0).any())


def has_ball(s) -> bool:
    """Is a ball shown in any world of the batch?"""
    return bool(s.ball_show.any())


def has_glow(s) -> bool:
    """Is a lamp shown in any world of the batch?"""
    return bool(s.lamp_show.any())


def draw_background(s, base: np.ndarray) -> np.ndarray:
    """(N, 128, 128, 3) float32 backgrounds: today's ``base`` with the weather, the lamp and the door."""
    n = len(s.x)
    back = np.broadcast_to(base, (n, FRAME_SIZE, FRAME_SIZE, 3)).copy()
    sky = back[:, :FLOOR_ROW]
    for tex, strength, speed, alpha, color in (
        (RAIN_TEX, s.rain, RAIN_SPEED, RAIN_ALPHA, P.RAIN),
        (SNOW_TEX, s.snow, SNOW_SPEED, SNOW_ALPHA, P.SNOW),
    ):
        if strength.any():
            rows = (_ROWS[None, :FLOOR_ROW] - np.floor(s.tick * speed)[:, None].astype(np.int64)) % PERIOD
            # Only the marks' pixels (a few percent of the sky), blended in float64 as a dense blend would be.
            at = np.nonzero(tex[rows] < strength[:, None, None])
            sky[at] += np.float64(alpha) * (color - sky[at])
    if s.lamp_show.any():
        for rect in LAMP_RECTS:
            _rect(back, s.lamp_show, P.DOOR_FRAME, *rect)
    if s.door_show.any():
        _rect(back, s.door_show, P.DOOR_FRAME, *DOOR_RECT)
        seen = np.round(LEAF_OPEN_W + (LEAF_RIGHT - LEAF_LEFT + 1 - LEAF_OPEN_W) * (1.0 - s.door_open))
        leaf = _COLS[None, :] > LEAF_RIGHT - seen[:, None]  # (N, 128): the leaf hangs on the right
        inside = np.where(leaf[:, None, :, None], P.DOOR_LEAF, P.DOORWAY)  # (N, 1, 128, 3)
        rows = slice(LEAF_TOP, FLOOR_ROW)
        cols = slice(LEAF_LEFT, LEAF_RIGHT + 1)
        shown = _shown(s.door_show, rows, cols)
        back[:, rows, cols] = np.where(shown, inside[:, :, cols], back[:, rows, cols])
    return back


def part_cover(lamp_show: np.ndarray, door_show: np.ndarray) -> np.ndarray:
    """(N, 128, 128) bool: the pixels the lamp and the door cover at these presences (N,), as
    ``draw_background`` draws them (the ball is found with the character; the weather covers the sky)."""
    cover = np.zeros((len(lamp_show), FRAME_SIZE, FRAME_SIZE), bool)
    for presence, rects in ((lamp_show, LAMP_RECTS), (door_show, (DOOR_RECT,))):
        for r0, r1, c0, c1 in rects:
            rows, cols = slice(r0, r1 + 1), slice(c0, c1 + 1)
            cover[:, rows, cols] |= _shown(presence, rows, cols)[..., 0]
    return cover


def _shown(presence: np.ndarray, rows: slice, cols: slice) -> np.ndarray:
    """(N, rows, cols, 1) bool: the pixels of an object of this presence that show (dissolving in)."""
    return (REVEAL[None, rows, cols] < presence[:, None, None])[..., None]


def ball_cover(X: np.ndarray, Y: np.ndarray, cx: np.ndarray, cy: np.ndarray) -> np.ndarray:
    """(N, H, W) bool: the pixels (centres at X, Y + 0.5) inside a ball at (cx, cy) per world."""
    dx = X - cx[:, None, None]
    dy = Y - cy[:, None, None]
    return (dx**2 + dy**2) < BALL_R**2


def draw_ball(frames: np.ndarray, s, center: tuple[np.ndarray, np.ndarray], worlds: np.ndarray) -> None:
    """The ball of ``worlds`` (N,) bool, a hard-edged disc at ``center`` (x, y per world), rising in or
    sinking out by its ``ball_show``. Only the rows and columns a ball of these worlds can cover are drawn."""
    if not worlds.any():
        return
    cx, cy = center
    rows = span(_ROWS[None] + 0.5, cy[worlds] - BALL_R, cy[worlds] + BALL_R)
    cols = span(_COLS[None] + 0.5, cx[worlds] - BALL_R, cx[worlds] + BALL_R)
    cover = ball_cover(_COLS[None, None, cols] + 0.5, _ROWS[None, rows, None] + 0.5, cx, cy)
    inside = (cover & worlds[:, None, None])[..., None] & _shown(s.ball_show, rows, cols)
    frames[:, rows, cols] = np.where(inside, P.BALL, frames[:, rows, cols])


def draw_glow(frames: np.ndarray, s) -> None:
    """The lamp's bulb: its head's colour when off, glowing (unlit by the scene's light) when on."""
    r0, r1, c0, c1 = BULB
    on = s.lamp_on[:, None, None, None]
    lit = P.DOOR_FRAME * s.light[:, None, None, :] * (1.0 - on) + P.LAMP_GLOW * on
    rows, cols = slice(r0, r1 + 1), slice(c0, c1 + 1)
    frames[:, rows, cols] = np.where(_shown(s.lamp_show, rows, cols), lit, frames[:, rows, cols])


def _rect(
    back: np.ndarray, presence: np.ndarray, color: np.ndarray, r0: int, r1: int, c0: int, c1: int
) -> None:
    """Paint rows r0..r1 and columns c0..c1 (inclusive) in ``color``, dissolved in by ``presence``."""
    rows, cols = slice(r0, r1 + 1), slice(c0, c1 + 1)
    back[:, rows, cols] = np.where(_shown(presence, rows, cols), color, back[:, rows, cols])
