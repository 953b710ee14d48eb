"""The renderer's primitives compute only the window of a crop they can cover, with every pixel's coverage
as if each pixel of the crop had been computed."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming_model.world.raster import (
    Cover,
    Grid,
    arc,
    arc_alpha,
    bar,
    bar_alpha,
    capsule,
    capsule_alpha,
    ellipse,
    ellipse_alpha,
    paint,
)

ROWS, COLS = 120, 64


def crops(offsets: list[int]) -> Grid:
    """Pixel centres of crops ROWS x COLS at these column offsets, as the renderer makes them."""
    ox = np.asarray(offsets, np.int64)
    cols = np.arange(COLS).astype(np.float32) + 0.5
    return Grid(cols[None] + ox[:, None].astype(np.float32), np.arange(8, 8 + ROWS).astype(np.float32) + 0.5)


def whole(cover: Cover, grid: Grid) -> np.ndarray:
    """The coverage over the whole crops of ``grid`` (N, H, W): its window's, zero elsewhere."""
    out = np.zeros((len(grid.x), len(grid.y), grid.x.shape[1]), cover.alpha.dtype)
    out[:, cover.rows, cover.cols] = cover.alpha
    return out


def assert_exact(grid: Grid, primitive, alpha, *params) -> None:
    """The primitive's windowed coverage is, pixel for pixel and to the bit, its ``alpha`` computed at every
    pixel of the crops."""
    everywhere = alpha(grid.x[:, None, :], grid.y[None, :, None], *params)
    assert np.array_equal(whole(primitive(grid, *params), grid), everywhere)


offsets = st.lists(st.integers(-40, 110), min_size=1, max_size=4)
coord = st.floats(-30.0, 160.0, allow_nan=False, width=32)
radius = st.floats(0.5, 25.0, width=32)


def per_world(values: list[float], n: int) -> np.ndarray:
    """(n, 1, 1) float32 parameters, one per world (the list cycled)."""
    return np.resize(np.asarray(values, np.float32), n)[:, None, None]


@settings(max_examples=60, deadline=None)
@given(offsets, st.lists(coord, min_size=2, max_size=8), radius, st.one_of(radius, st.just(1e-3)))
def test_an_ellipse_is_covered_exactly_within_its_window(ox, centres, rx, ry) -> None:
    grid = crops(ox)
    cx, cy = per_world(centres[::2], len(ox)), per_world(centres[1::2], len(ox))
    assert_exact(grid, ellipse, ellipse_alpha, cx, cy, rx, np.float32(ry))


@settings(max_examples=60, deadline=None)
@given(offsets, st.lists(coord, min_size=4, max_size=8), st.floats(0.5, 6.0))
def test_a_capsule_is_covered_exactly_within_its_window(ox, ends, r) -> None:
    grid = crops(ox)
    ax, ay, bx, by = (per_world(ends[i::4], len(ox)) for i in range(4))
    assert_exact(grid, capsule, capsule_alpha, ax, ay, bx, by, r)


@settings(max_examples=60, deadline=None)
@given(offsets, coord, coord, radius, st.floats(0.3, 5.0), st.floats(-1.5, 1.5))
def test_a_bar_is_covered_exactly_within_its_window_at_any_angle(
    ox, cx, cy, half_len, half_thick, angle
) -> None:
    grid = crops(ox)
    tilt = per_world([angle, -angle], len(ox))
    assert_exact(grid, bar, bar_alpha, cx, cy, half_len, half_thick, tilt)


@settings(max_examples=60, deadline=None)
@given(offsets, coord, coord, st.floats(1.0, 10.0), st.floats(-6.0, 6.0), st.floats(0.3, 2.0))
def test_an_arc_is_covered_exactly_within_its_window_smiling_or_frowning(
    ox, cx, cy, half_w, bend, thick
) -> None:
    grid = crops(ox)
    bends = per_world([bend, -bend], len(ox))
    assert_exact(grid, arc, arc_alpha, cx, cy, half_w, bends, thick)


def test_a_small_primitive_computes_only_the_pixels_near_it() -> None:
    cover = ellipse(crops([0, 3]), 32.0, 60.0, 4.0, 4.0)
    assert cover.alpha.shape[1] <= 12 and cover.alpha.shape[2] <= 12 + 3  # the two crops sit 3 columns apart


def test_painting_blends_covered_pixels_and_leaves_the_others_to_the_bit() -> None:
    rng = np.random.default_rng(0)
    canvas = rng.uniform(0, 255, (2, ROWS, COLS, 3)).astype(np.float32)
    before = canvas.copy()
    grid = crops([0, 10])
    cover = ellipse(grid, 30.0, 40.0, 6.0, 3.0)
    color = np.array([10.0, 200.0, 90.0], np.float32)
    paint(canvas, cover, color)
    alpha = whole(cover, grid)[..., None]
    covered = np.broadcast_to(alpha > 0, canvas.shape)
    assert covered.any() and (alpha == 1).any()
    assert np.array_equal(canvas[~covered], before[~covered])
    blended = (before + alpha * (color - before)).astype(np.float32)  # as an in-place add casts
    assert np.array_equal(canvas[covered], blended[covered])


def test_a_masked_cover_paints_nothing_in_the_worlds_masked_out() -> None:
    grid = crops([0, 0])
    cover: Cover = ellipse(grid, 30.0, 40.0, 6.0, 3.0).masked(np.array([True, False])[:, None, None])
    canvas = np.zeros((2, ROWS, COLS, 3), np.float32)
    paint(canvas, cover, np.array([255.0, 0.0, 0.0], np.float32))
    assert canvas[0].any() and not canvas[1].any()
