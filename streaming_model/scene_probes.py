"""Scene probes: read the light, the lamp, the weather, the door and the ball from RGB frames.

Like ``probes``, they look only at pixels, so they score rendered truth, codec reconstructions and model
samples alike. They also give ``probes.measure`` what it needs to read the character under any light and
in front of any scenery: the light to divide out, and the pixels that are scenery, not character.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .manifest import SCENE
from .masks import channel_sum, grow, l1, near, planar, planar_empty
from .world import palette as P
from .world.scene import (
    BALL_R,
    BULB,
    DOOR_LEFT,
    DOOR_RIGHT,
    DOOR_STAND_X,
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
    light_goal,
)
from .world.scenery import FLOOR_ROW

if TYPE_CHECKING:  # probes reads the scene first: its Measures is only named here
    from .probes import Measures

BAND = slice(0, 8)
"""Rows the character never reaches (the renderer draws it from row 8 down): the sky, the light and the
weather are read there."""
MARK_MIN = 40.0  # L1 from the sky for a pixel of the band to count as a raindrop or a snowflake
WEATHER_SHOWN = 0.02  # share of the band's pixels that are marks when rain or snow is shown
WEATHER_TOL = 30.0  # L1 from the sky-to-rain (or snow) line within which a pixel is weather, not character
FLOOR_BALL_ROW = FLOOR_ROW - BALL_R  # the row of a ball's centre on the floor
HELD_ROW = FLOOR_BALL_ROW - 8  # a ball above this row is off the floor
HELD_REACH = 28.0  # columns between the character and a ball in its paw
DOOR_SETTLE = 16  # frames at the door after which a door asked to open (close) must be so
_OPEN_SHARE = (LEAF_RIGHT - LEAF_LEFT + 1 - LEAF_OPEN_W) / (LEAF_RIGHT - LEAF_LEFT + 1)
_COLS = np.arange(128)
_R = np.arange(128)[:, None]
_POST = (_R > LAMP_HEAD_BOTTOM) & (_R < FLOOR_ROW) & (_COLS >= POST_LEFT - 1) & (_COLS <= POST_RIGHT + 1)
_FRAME_SIDE = (_R >= DOOR_TOP) & (_R < FLOOR_ROW) & (_COLS > LEAF_RIGHT - 1)  # the hinge side, out of reach


@dataclass
class SceneMeasures:
    """Per-frame scene measurements, each with the frames' leading shape."""

    light: np.ndarray  # (..., 3) per-channel light: the band's sky against the daylight sky
    lamp_shown: np.ndarray  # bool
    lamp_on: np.ndarray  # bool: its bulb glows
    rain: np.ndarray  # share of the band's pixels that are raindrops
    snow: np.ndarray  # share that are snowflakes
    door_shown: np.ndarray  # bool
    door_open: np.ndarray  # 0 closed .. 1 wide open (NaN where no door or it is hidden)
    ball_shown: np.ndarray  # bool
    ball_x: np.ndarray  # the ball's centre (NaN where none)
    ball_y: np.ndarray


def measure_scene(frames: np.ndarray) -> SceneMeasures:
    """Measure the scene of every frame of (..., H, W, 3) uint8 frames."""
    return in_daylight(frames)[0]


def in_daylight(frames: np.ndarray) -> tuple[SceneMeasures, np.ndarray]:
    """The scene of every frame of (..., H, W, 3) uint8 frames (``measure_scene``), and the frames (float32)
    as they would look in daylight (``normalise``d by the light it measured)."""
    f = planar(frames)
    light = np.median(f[..., BAND, :, :].reshape(*f.shape[:-3], -1, 3), axis=-2) / P.SKY
    g = normalise(f, light)
    band = g[..., BAND, :, :]
    off = band - P.SKY
    mark = channel_sum(np.abs(off)) > MARK_MIN
    shift = channel_sum(off)
    rain = (mark & (shift < 0)).mean((-1, -2))
    snow = (mark & (shift > 0)).mean((-1, -2))

    head = g[..., LAMP_TOP : LAMP_HEAD_BOTTOM + 1, LAMP_LEFT : LAMP_RIGHT + 1, :]
    bulb = f[..., BULB[0] : BULB[1] + 1, BULB[2] : BULB[3] + 1, :]
    lamp_on = near(bulb, P.LAMP_GLOW).mean((-1, -2)) > 0.5
    # Shown as soon as its place is no longer sky: while one fades in, its pixels are blends, and they must
    # not count as the character.
    lamp_shown = lamp_on | (_unlike_sky(head) > 0.5)
    top = g[..., DOOR_TOP : DOOR_TOP + 2, DOOR_LEFT : DOOR_RIGHT + 1, :]
    door_shown = _unlike_sky(top) > 0.5
    inner = g[..., LEAF_TOP:FLOOR_ROW, LEAF_LEFT : LEAF_RIGHT + 1, :]
    leaf_cols = near(inner, P.DOOR_LEAF).sum(-2)
    way_cols = near(inner, P.DOORWAY).sum(-2)
    leaf = (leaf_cols > way_cols).sum(-1)
    way = (way_cols > leaf_cols).sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        door_open = np.where(door_shown, np.clip(way / (leaf + way) / _OPEN_SHARE, 0.0, 1.0), np.nan)

    ball = near(g, P.BALL, 60.0)
    count = ball.sum((-1, -2))
    ball_shown = count >= 12
    with np.errstate(invalid="ignore", divide="ignore"):
        ball_x = np.where(ball_shown, (ball.sum(-2) * _COLS).sum(-1) / count, np.nan)
        ball_y = np.where(ball_shown, (ball.sum(-1) * _COLS).sum(-1) / count, np.nan)
    scene = SceneMeasures(
        light=light,
        lamp_shown=lamp_shown,
        lamp_on=lamp_on,
        rain=rain,
        snow=snow,
        door_shown=door_shown,
        door_open=door_open,
        ball_shown=ball_shown,
        ball_x=ball_x,
        ball_y=ball_y,
    )
    return scene, g


def _unlike_sky(region: np.ndarray) -> np.ndarray:
    """Share of a region's pixels more than ``MARK_MIN`` (L1) from the daylight sky."""
    return (l1(region, P.SKY) > MARK_MIN).mean((-1, -2))


def normalise(f: np.ndarray, light: np.ndarray) -> np.ndarray:
    """Frames (float) as they would look in daylight: the measured light divided out (channel by channel:
    numpy divides by a colour broadcast over the pixels about half as fast)."""
    lit = np.maximum(light, 0.05)
    out = planar_empty(f.shape, np.result_type(f, lit))
    for c in range(3):
        np.divide(f[..., c], lit[..., c, None, None], out=out[..., c])
    return out


def scenery_mask(g: np.ndarray, candidates: np.ndarray, own: np.ndarray, body: np.ndarray) -> np.ndarray:
    """(..., H, W) bool: which of the ``candidates`` (pixels of daylight frames ``g`` not of the sky or
    the floor) are scenery, not character, given the character's own colours (``own``, (k, 3)) and a mask
    of its body-coloured pixels. Only candidates are looked at: that is most of a frame's measuring time.

    Where the lamp or the door stands (as soon as it starts to rise), a pixel is the character only if it
    is nearer one of its colours than the scenery's; the ball (and a pixel around it) and blends of rain
    or snow over the sky are scenery anywhere."""
    out = np.zeros(g.shape[:-1], bool)
    for foot, (r0, c0, c1) in (
        ((POST_LEFT, POST_RIGHT), (LAMP_TOP, LAMP_LEFT, LAMP_RIGHT)),
        ((DOOR_RIGHT - 1, DOOR_RIGHT), (DOOR_TOP, DOOR_LEFT, DOOR_RIGHT)),
    ):
        # The columns of its foot that the character never reaches show that it is (rising) there.
        rising = _unlike_sky(g[..., FLOOR_ROW - 8 : FLOOR_ROW, foot[0] : foot[1] + 1, :]) > 0.5
        if rising.any():  # only there: the nearest colours are the costly part of a frame's measure
            here = g[..., r0:FLOOR_ROW, c0 : c1 + 1, :]
            scenery = _nearest(here, _SCENERY) <= _nearest(here, own)
            out[..., r0:FLOOR_ROW, c0 : c1 + 1] |= rising[..., None, None] & scenery
        # Thin dark bars (its post, its frame's far side) can take a limb's colour in a coded night frame:
        # their columns (and one beside) are scenery unless body-coloured.
        bars = _POST if c0 == LAMP_LEFT else _FRAME_SIDE
        out |= rising[..., None, None] & bars & ~body
    # The lamp's head, whose bulb blends toward its glow as it comes on, is above anything the character
    # reaches but for an ear's tip in a shaken jump at the left edge (the other ear then gives the top).
    out[..., LAMP_TOP : LAMP_HEAD_BOTTOM + 1, LAMP_LEFT : LAMP_RIGHT + 1] = True
    at = np.nonzero(candidates)
    seen = g[at]
    ball = np.zeros_like(out)
    ball[at] = near(seen, P.BALL, 60.0)
    out |= grow(ball)
    # Wherever it may be falling, even a few drops as rain sets in: no colour of a character lies near the
    # sky-to-rain blends, and only the eyes' white near the sky-to-snow ones (the eyes are read apart).
    for color in (P.RAIN, P.SNOW):
        out[at] |= _to_segment(seen, P.SKY, color) < WEATHER_TOL
    return out


_SCENERY = np.stack([P.DOOR_FRAME, P.DOOR_LEAF, P.DOORWAY, P.SKY])


def _nearest(g: np.ndarray, colors: np.ndarray) -> np.ndarray:
    """(..., H, W) L1 distance of every pixel to the nearest of ``colors`` (k, 3)."""
    return np.min([l1(g, c) for c in colors], axis=0)


def _to_segment(g: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """L1 distance of every colour (..., 3) to the colour segment a-b (the blends of b over a)."""
    d = b - a
    t = np.clip(((g - a) @ d) / float(d @ d), 0.0, 1.0)
    return channel_sum(np.abs(a + t[..., None] * d - g))


def expected_light(light: str, lamp: str) -> np.ndarray:
    """The per-channel light a scene settles to (what ``measure_scene`` reads once a fade is over)."""
    choices = {s.name: s.choices for s in SCENE}
    return light_goal(np.array([choices["light"].index(light)]), np.array([lamp == "on"]))[0]


def light_shown(m: SceneMeasures, light: str, lamp: str, tol: float = 0.08) -> np.ndarray:
    """Per frame: does the measured light match the scene's (every channel within ``tol``)?"""
    return (np.abs(m.light - expected_light(light, lamp)) < tol).all(-1)


def ball_held(m: Measures, sm: SceneMeasures) -> np.ndarray:
    """Per frame: is the ball off the floor beside the character (in its paw)?"""
    return sm.ball_shown & (sm.ball_y < HELD_ROW) & (np.abs(sm.ball_x - m.x) < HELD_REACH)


def scene_action_shown(action: str, m: Measures, sm: SceneMeasures) -> bool:
    """Do the frames of one held scene action (>= 12 frames from its first) show it? Walking to the door or
    the ball counts until it is reached; once there, the door must open or close (or already be so) and
    the ball be taken; put down and thrown, it must have left the paw (and a throw must have flown)."""
    if m.x.shape[-1] < 12:
        raise ValueError("scene_action_shown needs at least 12 frames (3 chunks)")
    x0, x1 = float(np.nanmean(m.x[:2])), float(np.nanmean(m.x[-2:]))
    if action in ("go_to_door", "open_door", "close_door"):
        there = m.x > DOOR_STAND_X - 5  # the door opening beside it moves the reading by up to 4
        went = bool(there[-1]) or x1 - x0 > 6.0
        if action == "go_to_door" or not went:
            return went
        settled = np.flatnonzero(there)
        if len(settled) == 0 or len(m.x) - settled[0] < DOOR_SETTLE:
            return True  # arrived too late in the action to see the door swing
        end = float(sm.door_open[-1])
        return end > 0.7 if action == "open_door" else end < 0.3
    held = ball_held(m, sm)
    if action == "pick_up":
        if held[-1]:
            return True
        gap = np.abs(sm.ball_x - m.x)
        return bool(gap[0] - gap[-1] > 6.0)
    if action == "put_down":
        return not held[-1] and (not held[0] or bool(sm.ball_y[-1] > FLOOR_BALL_ROW - 2))
    if action == "throw":
        if not held[0]:
            return not held[-1]
        flew = (sm.ball_y < HELD_ROW) & (np.abs(sm.ball_x - m.x) > HELD_REACH)
        return not held[-1] and bool(flew.any())
    raise ValueError(f"unknown scene action {action!r}")


def weather_shown(m: SceneMeasures) -> np.ndarray:
    """Per frame: the weather read, 0 clear, 1 rain, 2 snow (the order of the scene's choices). One kind of
    mark must outnumber the other twice: coding rings a dark raindrop with light."""
    rain = (m.rain > WEATHER_SHOWN) & (m.rain > 2 * m.snow)
    snow = (m.snow > WEATHER_SHOWN) & (m.snow > 2 * m.rain)
    return np.where(rain, 1, np.where(snow, 2, 0))
