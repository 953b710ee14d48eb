"""The probes' pixel arithmetic, written channel by channel for speed, gives numpy's plain forms to the bit:
the probes read what they read before it was fast."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming_model.masks import channel_sum, l1, near, planar
from streaming_model.scene_probes import normalise

colors = st.tuples(*[st.floats(0.0, 255.0, width=32)] * 3).map(lambda c: np.array(c, np.float32))


def frames_of(seed: int) -> np.ndarray:
    """Daylight-normalised frames as the probes hold them: float32, any value a light can bring."""
    rng = np.random.default_rng(seed)
    return (rng.random((3, 16, 24, 3)) * 400.0).astype(np.float32)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), color=colors)
def test_the_l1_distance_to_a_colour_is_numpys_to_the_bit(seed: int, color: np.ndarray) -> None:
    f = frames_of(seed)
    assert np.array_equal(l1(f, color), np.abs(f - color).sum(-1))
    assert np.array_equal(near(f, color), np.abs(f - color).sum(-1) < 70.0)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), color=colors)
def test_planar_frames_hold_the_same_values_a_channel_to_a_plane_and_measure_the_same(
    seed: int, color: np.ndarray
) -> None:
    frames = np.random.default_rng(seed).integers(0, 256, (2, 16, 24, 3), dtype=np.uint8)
    f = planar(frames)
    assert f.shape == frames.shape and f.dtype == np.float32
    assert np.array_equal(f, frames.astype(np.float32))
    assert all(f[..., c].flags.c_contiguous for c in range(3))
    assert np.array_equal(l1(f, color), l1(frames.astype(np.float32), color))
    assert np.array_equal(normalise(f, np.full((2, 3), 0.7, np.float32)), f / np.float32(0.7))


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_a_sum_over_the_channels_is_numpys_to_the_bit(seed: int) -> None:
    f = frames_of(seed) - 200.0
    assert np.array_equal(channel_sum(f), f.sum(-1))
    assert np.array_equal(channel_sum(f) / 3, f.mean(-1))


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_frames_brought_to_daylight_are_divided_by_the_light_to_the_bit(seed: int) -> None:
    f = frames_of(seed)
    light = np.random.default_rng(seed).random((3, 3)).astype(np.float32)  # some channels below 0.05
    expected = f / np.maximum(light, 0.05)[..., None, None, :]
    out = normalise(f, light)
    assert out.dtype == expected.dtype
    assert np.array_equal(out, expected)
