"""Render world states to RGB frames (N, 128, 128, 3) uint8."""

from __future__ import annotations

import numpy as np

from ..manifest import FRAME_SIZE
from . import palette as P
from .raster import Grid, arc, bar, capsule, ellipse, paint
from .scene import BALL_R
from .scenery import (
    FLOOR_ROW,
    ball_cover,
    draw_background,
    draw_ball,
    draw_glow,
    has_ball,
    has_glow,
    is_scenic,
)
from .state import WorldState

FLOOR_Y = float(FLOOR_ROW)
HEAD_R = 13.0
SIT_DROP = 12.0
CROUCH_DROP = 8.0

_Y, _X = np.mgrid[0:FRAME_SIZE, 0:FRAME_SIZE].astype(np.float32) + 0.5
_BACKGROUND = np.where((_Y >= FLOOR_Y)[..., None], P.FLOOR, P.SKY).astype(np.float32)

# Crop window around the character: rendering only there is ~2.5x faster than the full frame.
CROP_W = 64
CROP_TOP = 8
_CROP_ROWS = np.arange(CROP_TOP, FRAME_SIZE).astype(np.float32) + 0.5
_CROP_COLS = np.arange(CROP_W).astype(np.float32) + 0.5


def geometry(s: WorldState) -> dict[str, np.ndarray]:
    """Screen positions of the body parts (shared by the renderer and the probes' tests)."""
    lift = s.jump_y - SIT_DROP * s.sit - CROUCH_DROP * s.crouch
    torso_cy = FLOOR_Y - 34.0 - lift
    head_cx = s.x + s.shake + s.head_dx + 1.5 * s.facing
    head_cy = FLOOR_Y - 60.0 - lift + s.nod + s.head_dy
    shoulder_y = torso_cy - 8.0
    return {"torso_cy": torso_cy, "head_cx": head_cx, "head_cy": head_cy, "shoulder_y": shoulder_y}


def paw_position(x, shoulder_y, side, raise_, wave):
    """Centre of a paw: at rest beside the body, raised (``raise_`` 1) beside the head, moved by a wave."""
    sx = x + side * 11.0
    rest_x, rest_y = sx + side * 5.0, shoulder_y + 17.0
    up_x, up_y = sx + side * 8.0 + 5.0 * wave, shoulder_y - 17.0
    return rest_x + (up_x - rest_x) * raise_, rest_y + (up_y - rest_y) * raise_


def ball_center(s: WorldState) -> tuple[np.ndarray, np.ndarray]:
    """Where the ball is drawn: on (or above) the floor at its place, or, as much as it is held, in the paw
    on the side faced."""
    floor_x, floor_y = s.ball_x, FLOOR_Y - BALL_R - s.ball_y
    side = np.where(s.facing < -0.3, -1.0, 1.0)
    raise_ = np.where(side < 0, s.paw_l, s.paw_r)
    px, py = paw_position(s.x, geometry(s)["shoulder_y"], side, raise_, s.wave)
    px, py = px + 3.0 * side, py + 4.0  # peeking out below the paw
    return floor_x + (px - floor_x) * s.held, floor_y + (py - floor_y) * s.held


def render(s: WorldState) -> np.ndarray:
    """Draw every world of the batch; returns uint8 frames (N, H, W, 3)."""
    n = len(s.x)
    ox = np.round(s.x).astype(np.int64) - CROP_W // 2  # crop origin per frame
    grid = Grid(_CROP_COLS[None] + ox[:, None].astype(np.float32), _CROP_ROWS)
    scenic = is_scenic(s)
    back = draw_background(s, _BACKGROUND) if scenic else None
    canvas = _crop(back, ox) if back is not None else _crop_background(n)
    ball = _draw_character(canvas, s, grid)
    frames = back if back is not None else np.broadcast_to(_BACKGROUND, (n, FRAME_SIZE, FRAME_SIZE, 3)).copy()
    _paste(frames, canvas, ox)
    if scenic:
        _light_and_ball(frames, s, ball)
    frames += 0.5
    return np.clip(frames, 0, 255, out=frames).astype(np.uint8)


def _draw_character(canvas: np.ndarray, s: WorldState, grid: Grid) -> tuple[np.ndarray, np.ndarray] | None:
    """Paint the character (with its shadow and a ball in its paw) onto the crops, back to front; returns
    where the ball is (None when no world shows one)."""
    pal = P.PALETTES[s.identity]  # (N, 3, 3)
    body, belly, limb = pal[:, 0], pal[:, 1], pal[:, 2]
    g = {k: v[:, None, None] for k, v in geometry(s).items()}
    c = {k: getattr(s, k)[:, None, None] for k in ("x", "facing", "sit", "jump_y", "paw_l", "paw_r", "wave")}
    x, f = c["x"], c["facing"]
    _draw_shadow(canvas, grid, x, c["jump_y"])
    _draw_legs(canvas, s, grid, c, limb)

    torso_cy = g["torso_cy"]
    paint(canvas, ellipse(grid, x, torso_cy, 12.5, 15.0), body)
    paint(canvas, ellipse(grid, x + 3.0 * f, torso_cy + 2.0, 7.5, 10.0), belly)

    ball = _draw_held_ball(canvas, s, grid)
    _draw_arms(canvas, grid, c, g["shoulder_y"], limb)
    hx, hy = g["head_cx"], g["head_cy"]
    _draw_head(canvas, grid, hx, hy, f, body, limb)
    _draw_eyes(canvas, s, grid, hx, hy, f)
    _draw_mouth(canvas, s, grid, hx, hy, f)
    return ball


def _draw_shadow(canvas: np.ndarray, grid: Grid, x: np.ndarray, jy: np.ndarray) -> None:
    """Shadow on the floor shrinks as the character rises."""
    shrink = 1.0 - 0.5 * np.minimum(jy / 16.0, 1.0)
    sh = ellipse(grid, x, FLOOR_Y + 1.5, 17.0 * shrink, 3.0)
    sub = canvas[:, sh.rows, sh.cols]
    sub -= sh.alpha[..., None] * (1.0 - P.SHADOW_DARKEN) * sub * (grid.y[sh.rows] >= FLOOR_Y)[:, None, None]


def _draw_legs(
    canvas: np.ndarray,
    s: WorldState,
    grid: Grid,
    c: dict[str, np.ndarray],
    limb: np.ndarray,
) -> None:
    """Both legs, from the hips (lowered by sitting and crouching) to the feet (striding when walking)."""
    x, f, sit, jy = c["x"], c["facing"], c["sit"], c["jump_y"]
    lift = jy - SIT_DROP * sit - CROUCH_DROP * s.crouch[:, None, None]
    hip_y = FLOOR_Y - 22.0 - lift
    walk = np.sin(x * (2 * np.pi / 12.0)) * (np.abs(f) > 0.5)  # stride follows position
    for side in (-1.0, 1.0):
        foot_x = x + side * 6.0 + 4.0 * walk * side + 10.0 * sit * f
        foot_y = FLOOR_Y - 3.0 - jy
        paint(canvas, capsule(grid, x + side * 5.0, hip_y, foot_x, foot_y, 3.5), limb)


def _draw_held_ball(canvas: np.ndarray, s: WorldState, grid: Grid) -> tuple[np.ndarray, np.ndarray] | None:
    """A ball in the paw is behind it (the paw holds it): paint it before the arms; returns where the ball
    is (None when no world shows one)."""
    ball = ball_center(s) if has_ball(s) else None
    if ball is not None:
        in_paw = (s.held == 1.0) & (s.ball_show > 0.5)
        canvas[ball_cover(grid.x[:, None, :], grid.y[None, :, None], *ball) & in_paw[:, None, None]] = P.BALL
    return ball


def _draw_arms(
    canvas: np.ndarray,
    grid: Grid,
    c: dict[str, np.ndarray],
    shoulder_y: np.ndarray,
    limb: np.ndarray,
) -> None:
    """Both arms, from the shoulders to the paws, each raised as much as its paw is."""
    x = c["x"]
    for side, raise_ in ((-1.0, c["paw_l"]), (1.0, c["paw_r"])):
        sx = x + side * 11.0
        px, py = paw_position(x, shoulder_y, side, raise_, c["wave"])
        paint(canvas, capsule(grid, sx, shoulder_y, px, py, 3.0), limb)
        paint(canvas, ellipse(grid, px, py, 4.5, 4.5), limb)


def _draw_head(
    canvas: np.ndarray,
    grid: Grid,
    hx: np.ndarray,
    hy: np.ndarray,
    f: np.ndarray,
    body: np.ndarray,
    limb: np.ndarray,
) -> None:
    """The ears (shifted by the facing) and the head in front of them."""
    for side in (-1.0, 1.0):
        paint(canvas, ellipse(grid, hx + side * 10.0 + 2.0 * f, hy - 11.0, 4.5, 4.5), limb)
    paint(canvas, ellipse(grid, hx, hy, HEAD_R, HEAD_R), body)


def _draw_eyes(
    canvas: np.ndarray,
    s: WorldState,
    grid: Grid,
    hx: np.ndarray,
    hy: np.ndarray,
    f: np.ndarray,
) -> None:
    """Eye whites, pupils (following the gaze) and brows (lifted and tilted by the emotion)."""
    emo = s.emo[:, :, None, None]  # neutral, happy, sad, surprised, angry
    wide = s.eye_wide[:, None, None]
    eye_ry = 4.0 + 1.5 * wide
    brow_lift = 1.5 * emo[:, 1] + 2.5 * emo[:, 3] + 1.5 * wide - 0.5 * emo[:, 4]
    brow_tilt = 0.45 * emo[:, 2] - 0.5 * emo[:, 4]  # sad: inner ends up; angry: inner ends down
    for side in (-1.0, 1.0):
        ex = hx + side * 5.5 + 4.0 * f
        ey = hy - 2.0
        far = np.clip(-side * f, 0.0, 1.0)  # the eye on the side turned away narrows
        paint(canvas, ellipse(grid, ex, ey, 3.6 * (1.0 - 0.45 * far), eye_ry), P.EYE_WHITE)
        gx = s.gaze_x[:, None, None]
        gy = s.gaze_y[:, None, None]
        paint(canvas, ellipse(grid, ex + 1.6 * gx + 0.8 * f, ey + 1.8 * gy, 1.8, 1.8), P.PUPIL)
        paint(canvas, bar(grid, ex, ey - 6.0 - brow_lift, 3.5, 0.9, -side * brow_tilt), P.BROW)


def _draw_mouth(
    canvas: np.ndarray,
    s: WorldState,
    grid: Grid,
    hx: np.ndarray,
    hy: np.ndarray,
    f: np.ndarray,
) -> None:
    """The mouth line (bent by the emotion) and, as far as it is open, the open mouth."""
    emo = s.emo[:, :, None, None]  # neutral, happy, sad, surprised, angry
    mx, my = hx + 4.0 * f, hy + 7.0
    bend = 2.2 * emo[:, 1] - 2.0 * emo[:, 2] - 0.8 * emo[:, 4]
    paint(canvas, arc(grid, mx, my - bend * 0.5, 4.5, bend, 0.7), P.MOUTH_LINE)
    open_ry = 5.0 * s.mouth[:, None, None] + 2.0 * emo[:, 3]
    paint(
        canvas,
        ellipse(grid, mx, my + 0.5, 3.8, np.maximum(open_ry, 1e-3)).masked(open_ry > 0.3),
        P.MOUTH_OPEN,
    )


def render_scenery(s: WorldState) -> np.ndarray:
    """What ``render`` draws without the character (its shadow goes with it) and without the ball: the
    scenery alone, uint8 (N, H, W, 3), for telling what the character is and handles from the rest."""
    n = len(s.x)
    if not is_scenic(s):
        return np.broadcast_to(
            np.clip(_BACKGROUND + 0.5, 0, 255).astype(np.uint8), (n, FRAME_SIZE, FRAME_SIZE, 3)
        )
    back = draw_background(s, _BACKGROUND)
    _light_and_ball(back, s, None)
    return np.clip(back + 0.5, 0, 255).astype(np.uint8)


def _light_and_ball(frames: np.ndarray, s: WorldState, ball: tuple[np.ndarray, np.ndarray] | None) -> None:
    """What lies in front of the character: a ball not (yet) in the paw, at ``ball``, the light on all of
    it, and the lamp's glow, which gives light rather than takes it."""
    if ball is not None:
        draw_ball(frames, s, ball, s.held < 1.0)
    frames *= s.light[:, None, None, :]
    if has_glow(s):
        draw_glow(frames, s)


def _crop_background(n: int) -> np.ndarray:
    """Today's background under each crop: only the rows matter, it is uniform along x."""
    return np.broadcast_to(
        _BACKGROUND[None, CROP_TOP:, :CROP_W], (n, FRAME_SIZE - CROP_TOP, CROP_W, 3)
    ).copy()


def _crop(back: np.ndarray, ox: np.ndarray) -> np.ndarray:
    """Each world's own background under its crop (columns outside the frame repeat its edge; they are
    dropped when pasted)."""
    cols = np.clip(ox[:, None] + np.arange(CROP_W), 0, FRAME_SIZE - 1)
    return np.stack([back[i, CROP_TOP:].take(c, axis=1) for i, c in enumerate(cols)])


def _paste(frames: np.ndarray, canvas: np.ndarray, ox: np.ndarray) -> None:
    """Write each crop into its frame at column offset ox, dropping columns outside the frame."""
    for i, o in enumerate(ox.tolist()):
        c0 = max(o, 0)
        c1 = max(min(o + CROP_W, FRAME_SIZE), c0)  # a crop wholly outside pastes nothing
        frames[i, CROP_TOP:, c0:c1] = canvas[i, :, c0 - o : c1 - o]
