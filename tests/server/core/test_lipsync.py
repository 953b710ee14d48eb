"""The audio-to-mouth offset as media out measures it: a real utterance's loudness per frame against a mouth
envelope in step with it, behind it, ahead of it, or not following it at all."""

from __future__ import annotations

import numpy as np
import pytest

from server.core.lipsync import MAX_LAG_FRAMES, LipSync, best_lag
from server.voice import Voice, loudness

FPS = 24


@pytest.fixture(scope="module")
def voiced() -> tuple[np.ndarray, np.ndarray]:
    """A real utterance cut into frames' audio slices, and the mouth envelope the session makes of it."""
    utterance = Voice().synthesize("I will tell you about the forest, the river and the old stone bridge.")
    per = utterance.rate // FPS
    n = -(-utterance.samples.size // per)
    slices = np.zeros((n, per), dtype=np.float32)
    slices.reshape(-1)[: utterance.samples.size] = utterance.samples
    return slices, utterance.frame_envelope(FPS)


def offsets(mouth: np.ndarray, slices: np.ndarray) -> list[float]:
    """What a ``LipSync`` reports over the frames: each frame's mouth and its audio slice's loudness."""
    sync = LipSync(FPS)
    return [
        o
        for m, a in zip(mouth, slices, strict=True)
        if (o := sync.add(float(m), float(loudness(a)))) is not None
    ]


def shifted(envelope: np.ndarray, frames: int) -> np.ndarray:
    """``envelope`` ``frames`` frames later (earlier when negative), closed where it has no value."""
    out = np.zeros_like(envelope)
    if frames >= 0:
        out[frames:] = envelope[: envelope.size - frames]
    else:
        out[:frames] = envelope[-frames:]
    return out


def test_the_envelope_is_the_loudness_of_the_slices(voiced: tuple[np.ndarray, np.ndarray]) -> None:
    slices, envelope = voiced
    np.testing.assert_array_equal(loudness(slices), envelope)


@pytest.mark.parametrize("lag", [0, 2, -3])
def test_a_mouth_behind_or_ahead_of_the_voice_is_measured_by_its_lag(
    voiced: tuple[np.ndarray, np.ndarray], lag: int
) -> None:
    slices, envelope = voiced
    found = offsets(shifted(envelope, lag), slices)
    assert len(found) == slices.shape[0] // (2 * FPS) >= 1  # one a full two-second window
    assert found == [pytest.approx(lag / FPS)] * len(found)


def test_a_mouth_that_does_not_follow_the_voice_gives_no_offset(
    voiced: tuple[np.ndarray, np.ndarray],
) -> None:
    slices, envelope = voiced
    assert offsets(np.random.default_rng(3).permutation(envelope), slices) == []


def test_silence_with_a_closed_mouth_opens_no_window(voiced: tuple[np.ndarray, np.ndarray]) -> None:
    slices, envelope = voiced
    window = 2 * MAX_LAG_FRAMES + 2
    sync = LipSync(FPS, window_frames=window)
    quiet = np.zeros(slices.shape[1], dtype=np.float32)
    assert all(sync.add(0.0, float(loudness(quiet))) is None for _ in range(10 * FPS + 3))
    # The first window starts with the speech: it closes on the speech's window-th frame, not before.
    start = int(np.argmax(envelope > 0))
    found = [
        sync.add(float(m), float(loudness(a))) for m, a in zip(envelope[start:], slices[start:], strict=True)
    ]
    assert found.index(0.0) == window - 1
    assert all(o is None for o in found[: window - 1])


def test_a_flat_voice_or_mouth_has_no_lag() -> None:
    lag, r = best_lag(np.zeros(30), np.linspace(0, 1, 30))
    assert lag == 0 and np.isnan(r)


def test_a_window_too_short_for_the_lags_is_refused() -> None:
    with pytest.raises(ValueError, match="too short"):
        LipSync(FPS, window_frames=2 * MAX_LAG_FRAMES)
