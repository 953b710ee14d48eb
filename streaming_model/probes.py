"""Probes: read RGB frames and measure what the procedural world knows.

They are the eyes of every quality test: they look only at pixels (never at world state), so they work
the same on rendered truth, codec reconstructions and model samples. Frames are uint8 (..., H, W, 3).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from .masks import channel_sum, l1, near, opened
from .scene_probes import SceneMeasures, in_daylight, scenery_mask
from .world import palette as P
from .world.render import FLOOR_Y

_ROWS = np.arange(128, dtype=np.float32)
_BELOW_FLOOR = (_ROWS >= FLOOR_Y)[:, None]  # (128, 1): the floor's rows
EYE_REACH = 16.0  # columns from the head's centre within which its eyes are looked for
FALLING = 0.005  # share of the sky band's pixels that are raindrops or snowflakes when some are falling


@dataclass
class Measures:
    """Per-frame measurements, each an array with the frames' leading shape."""

    x: np.ndarray  # character position: body colour centroid below the head (head motion excluded)
    facing: np.ndarray  # eye offset from head centre, about -1 (left) .. +1 (right)
    paw_left: np.ndarray  # bool: a paw is raised on the screen-left side
    paw_right: np.ndarray
    mouth: np.ndarray  # mouth openness, about 0 closed .. 1 open
    eye_x: np.ndarray  # eye-white centroid
    eye_y: np.ndarray
    head_x: np.ndarray  # head centre column (tracks head shake)
    top: np.ndarray  # highest character row
    bottom_gap: np.ndarray  # pixels between the lowest character row and the floor
    sitting: np.ndarray  # bool
    jumping: np.ndarray  # bool
    identity_dist: np.ndarray  # L2 RGB distance of the body colour to the reference palette's body
    visible: np.ndarray  # bool: a character is found at all


def _centroid(mask: np.ndarray, axis: int) -> np.ndarray:
    """Mean coordinate of mask pixels along axis (-1 columns, -2 rows); NaN when empty."""
    count = mask.sum((-1, -2))
    weights = mask.sum(-1 if axis == -2 else -2)  # per row (axis -2) or per column (axis -1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (weights * _ROWS).sum(-1) / count


def measure(frames: np.ndarray, identity: int) -> Measures:
    """Measure every frame of (..., H, W, 3) uint8 frames of a character of the given identity."""
    return measure_with_scene(frames, identity)[0]


def measure_with_scene(frames: np.ndarray, identity: int) -> tuple[Measures, SceneMeasures]:
    """``measure`` and ``scene_probes.measure_scene`` of the same frames, the scene read once for both."""
    scene, f = in_daylight(frames)  # f: as in daylight, whatever the scene's light
    pal = P.PALETTES[identity]
    char, body, limb = _character(f, pal, scene)
    mouth = near(f, P.MOUTH_OPEN) & char
    # A row counts with a few pixels (one stray pixel is not the body) but not with half the width: the
    # character is narrower, and a JPEG-coded frame smears the floor's edge into a full-width line.
    per_row = char.sum(-1)
    rows_any = (per_row >= 3) & (per_row < 64)
    top = np.where(rows_any.any(-1), np.argmax(rows_any, -1), 128).astype(np.float32)
    head_x, eyes = _head_and_eyes(f, body, top)

    visible = char.sum((-1, -2)) > 200
    eye_x = _centroid(eyes, -1)
    eye_y = _centroid(eyes, -2)
    below_head = (_ROWS[:, None] - np.nan_to_num(eye_y)[..., None, None]) > 18
    x = _centroid(char & below_head & ~_BELOW_FLOOR, -1)  # on the floor, JPEG coding blurs the shadow's edge
    facing = _facing(f, pal, body, below_head, eye_x, head_x)
    paw_left, paw_right = _raised_paws(limb, eye_y, head_x)
    bottom_gap, jumping, sitting = _height(rows_any, top)

    measures = Measures(
        x=x,
        facing=facing,
        paw_left=paw_left,
        paw_right=paw_right,
        mouth=mouth.sum((-1, -2)) / (np.pi * 3.8 * 5.0),
        eye_x=eye_x,
        eye_y=eye_y,
        head_x=head_x,
        top=top,
        bottom_gap=bottom_gap,
        sitting=sitting,
        jumping=jumping,
        identity_dist=_identity_dist(f, body, pal),
        visible=visible,
    )
    return measures, scene


def _character(
    f: np.ndarray, pal: np.ndarray, scene: SceneMeasures
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Masks of the character, its body colour and its limb colour in daylight-normalised frames ``f``:
    what is neither sky nor floor (nor shadow on it), less the scenery and the falling weather."""
    sky = l1(f, P.SKY) > 60
    # On the floor, shadow (also its soft edge) is the floor colour scaled down: same channel ratios.
    ratio = f / P.FLOOR
    r, g, b = ratio[..., 0], ratio[..., 1], ratio[..., 2]
    mean = channel_sum(ratio) / 3
    floorlike = (
        (np.maximum(np.maximum(r, g), b) - np.minimum(np.minimum(r, g), b) < 0.12)
        & (mean > 0.4)
        & (mean < 1.15)
    )
    char = np.where(_BELOW_FLOOR, ~floorlike, sky)
    body = near(f, pal[0])
    limb = near(f, pal[2])
    scenery = scenery_mask(f, char, np.concatenate([pal, P.FACE]), body)
    char &= ~scenery
    limb &= ~scenery
    # Raindrops and snowflakes that coding has smeared off their colours are thin: an opening (5x5)
    # removes them where it is raining or snowing (2-pixel streaks and their coding halo), and keeps the
    # character, whose limbs are 6 pixels and more, and any pixel of its own colours (a foot beside the
    # ball, cut thin where the ball is taken out, stays).
    falling = (scene.rain + scene.snow) > FALLING
    if falling.any():
        own = body | limb | near(f, pal[1])
        char = np.where(falling[..., None, None], opened(char, 2) | (char & own), char)
    return char, body, limb


def _head_and_eyes(f: np.ndarray, body: np.ndarray, top: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The head's centre column and the mask of the eye whites, both found from the character's top row."""
    eye_white = l1(f, P.EYE_WHITE) < 60  # bellies are >= 90 away; blur needs some slack
    # Eyes sit 10-18 rows below the top of the ears whatever the pose: look only there.
    below_top = _ROWS[:, None] - top[..., None, None]
    # Head centre column: body-coloured pixels in the head's rows (found from the ears' top, so it
    # does not need the eyes, which blur first when the head moves fast).
    head_rows = (below_top >= 4) & (below_top <= 28)
    head_x = _centroid(body & head_rows, -1)
    # Eyes sit within 14 columns of the head's centre: snowflakes beside the head are as white.
    beside = np.abs(_ROWS[None, :] - np.nan_to_num(head_x, nan=-99.0)[..., None, None]) < EYE_REACH
    eyes = eye_white & (below_top >= 5) & (below_top <= 24) & beside
    return head_x, eyes


def _facing(
    f: np.ndarray,
    pal: np.ndarray,
    body: np.ndarray,
    below_head: np.ndarray,
    eye_x: np.ndarray,
    head_x: np.ndarray,
) -> np.ndarray:
    """Facing from two cues: the eyes' offset in the head (sharp on truth) and the belly's offset on the
    torso (large, so it survives blur); their mean, or whichever is visible."""
    eye_facing = (eye_x - head_x) / 9.0
    # One belly (violet's lavender) is only ~50 from the sky: exclude near-sky pixels explicitly.
    belly = near(f, pal[1]) & below_head & (l1(f, P.SKY) > 30)
    torso_x = _centroid((body | belly) & below_head, -1)  # arms and legs excluded: raised paws shift x
    belly_facing = (_centroid(belly, -1) - torso_x) / 3.0
    belly_facing = np.where(np.abs(belly_facing) < 1.6, belly_facing, np.nan)  # stray matches elsewhere
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(np.stack([eye_facing, belly_facing]), axis=0)


def _raised_paws(limb: np.ndarray, eye_y: np.ndarray, head_x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Is a paw raised on the screen-left, the screen-right side? A raised paw sits beside the head, level
    with the eyes or a little below."""
    band = (_ROWS[:, None] - np.nan_to_num(eye_y)[..., None, None] > -6) & (
        _ROWS[:, None] - np.nan_to_num(eye_y)[..., None, None] < 12
    )
    cols = _ROWS[None, :]
    hx = np.nan_to_num(head_x)[..., None, None]
    paw_left = (limb & band & (cols < hx - 14)).sum((-1, -2)) > 12
    paw_right = (limb & band & (cols > hx + 14)).sum((-1, -2)) > 12
    return paw_left, paw_right


def _height(rows_any: np.ndarray, top: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The gap between the character and the floor, and from it and the top row: jumping, sitting."""
    # The lowest row above the floor: JPEG coding blurs the floor's edge and the shadow, so rows on the
    # floor are left out (a character standing on it has a gap of 0 either way).
    above = rows_any & ~_BELOW_FLOOR[:, 0]
    bottom = 127 - np.argmax(above[..., ::-1], -1)
    bottom_gap = (FLOOR_Y - 1 - bottom).astype(np.float32)
    jumping = bottom_gap > 3
    sitting = (~jumping) & (top > FLOOR_Y - 70)
    return bottom_gap, jumping, sitting


def _identity_dist(f: np.ndarray, body: np.ndarray, pal: np.ndarray) -> np.ndarray:
    """L2 RGB distance of the body pixels' median colour to the palette's body colour."""
    pixels = f.reshape(-1, f.shape[-3] * f.shape[-2], 3)
    masks = body.reshape(len(pixels), -1)
    # A frame without character pixels has no median: it counts as black, far from every palette colour.
    # (Frame by frame over the body's pixels: numpy's nanmedian of NaN-masked frames, channel by channel
    # through every pixel, took several times as long for the same values.)
    body_rgb = np.stack(
        [
            np.median(px[m], axis=0) if m.any() else np.zeros(3, f.dtype)
            for px, m in zip(pixels, masks, strict=True)
        ]
    )
    return np.linalg.norm(body_rgb.reshape(*f.shape[:-3], 3) - pal[0], axis=-1)


def identify(frames: np.ndarray) -> np.ndarray:
    """The palette index whose body colour covers the most pixels, per frame (under any light)."""
    f = in_daylight(frames)[1]
    counts = np.stack([near(f, pal[0]).sum((-1, -2)) for pal in P.PALETTES], -1)
    return counts.argmax(-1)


def motion_energy(frames: np.ndarray) -> np.ndarray:
    """Mean absolute pixel change between consecutive frames along axis -4 (length T-1)."""
    f = frames.astype(np.float32)
    return np.abs(np.diff(f, axis=-4)).mean((-1, -2, -3))


def head_oscillation(m: Measures) -> tuple[np.ndarray, np.ndarray]:
    """Nod and shake signatures over the last axis (frames): the spread of the head's top row and of
    the head's column relative to the body (so that walking does not read as shaking)."""
    top = m.top - np.nanmean(m.top, -1, keepdims=True)
    rel_x = m.head_x - m.x
    head_dx = rel_x - np.nanmean(rel_x, -1, keepdims=True)
    return np.nanstd(top, -1), np.nanstd(head_dx, -1)


def _slice(m: Measures, sl: slice) -> Measures:
    return Measures(**{k: v[..., sl] for k, v in vars(m).items()})


def action_shown(
    action: str, m: Measures, paw: str = "right", target_x: float = 0.0, side: str = "other"
) -> bool:
    """Do the frames of one held action (measures over >= 12 frames from the action's first frame)
    show that action? Transitions get the first chunk; the verdict reads the rest.

    Walking is checked by displacement (unless the character is already at the edge it walks to),
    turning by the facing sign flipping (or ending on the side asked for), cyclic head motions by
    their signatures.
    """
    if m.x.shape[-1] < 12:
        raise ValueError("action_shown needs at least 12 frames (3 chunks)")
    late = _slice(m, slice(4, None))
    x0, x1 = float(np.nanmean(m.x[:2])), float(np.nanmean(m.x[-2:]))
    if action in ("walk_left", "walk_right"):
        sign = -1.0 if action == "walk_left" else 1.0
        at_edge = (x0 < 30) if sign < 0 else (x0 > 98)
        facing_ok = np.nanmean(np.sign(late.facing[-4:])) * sign > 0.5
        return bool(facing_ok and (at_edge or (x1 - x0) * sign > 6.0))
    if action == "turn":
        first, last = float(np.nanmean(m.facing[:1])), float(np.nanmean(m.facing[-3:]))
        if side != "other":
            return bool(last * (1.0 if side == "right" else -1.0) > 0.4)
        # Turning around: the goal side depends on the start; any large change of facing counts.
        return bool(abs(last - first) > 0.35 and abs(last) > 0.4)
    if action == "jump":
        return bool(m.jumping.any())
    if action == "sit":
        return bool(late.sitting[-4:].all())
    if action == "wave":
        return bool((late.paw_right if paw == "right" else late.paw_left)[-4:].all())
    if action in ("nod", "shake_head"):
        nod, shake = head_oscillation(late)
        return (
            bool(nod > 1.0 and nod > 1.5 * shake)
            if action == "nod"
            else bool(shake > 1.0 and shake > 1.5 * nod)
        )
    if action == "startle":
        return bool((m.paw_left[:12] & m.paw_right[:12]).any())
    if action == "look_at":
        if abs(target_x) < 0.5:
            return bool(abs(np.nanmean(late.facing[-4:])) < 0.6)
        return bool(np.sign(np.nanmean(late.facing[-4:])) == np.sign(target_x))
    if action == "idle":
        return bool(
            not late.paw_left[-4:].any() and not late.paw_right[-4:].any() and not late.jumping[-4:].any()
        )
    raise ValueError(f"unknown action {action!r}")
