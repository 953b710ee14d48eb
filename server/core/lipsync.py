"""The audio-to-mouth offset of what a session sends: the mouth envelope each frame was generated with,
against the loudness of the character's audio sent with that frame, lined up over a stretch of speech.

Both are known where media out puts a frame and its audio slice together; the mouth envelope is made of
the same loudness (``server.voice.loudness``) from the voice's samples, so a session in step lines them
up at lag 0 with a correlation of 1. A voice that starts late, a slice taken from the wrong place, or a
mouth decided for other audio moves the best lag or loses the match.
"""

from __future__ import annotations

import numpy as np

MAX_LAG_FRAMES = 6
"""Lags tried either way (a quarter of a second at 24 fps)."""
MIN_CORRELATION = 0.3
"""Below this the voice does not drive the mouth, and a best lag would be noise."""


def best_lag(voice: np.ndarray, mouth: np.ndarray, max_lag: int = MAX_LAG_FRAMES) -> tuple[int, float]:
    """The lag in frames (+ = mouth late) that best lines ``voice`` (loudness per frame) up with ``mouth``
    (openness per frame), with the correlation there; the smaller lag wins a tie. (0, nan) when either is
    flat."""
    n = min(voice.size, mouth.size)
    voice, mouth = np.asarray(voice[:n], dtype=np.float64), np.asarray(mouth[:n], dtype=np.float64)
    if n < 2 or voice.std() == 0 or mouth.std() == 0:
        return 0, float("nan")

    def r_at(lag: int) -> float:
        m = n - abs(lag)
        a, b = voice[max(0, -lag) :][:m], mouth[max(0, lag) :][:m]
        if m < 2 or a.std() == 0 or b.std() == 0:
            return -1.0
        return float(np.corrcoef(a, b)[0, 1])

    lags = range(-min(max_lag, n - 2), min(max_lag, n - 2) + 1)
    best = max(lags, key=lambda lag: (round(r_at(lag), 9), -abs(lag)))
    return best, r_at(best)


class LipSync:
    """Collects (mouth, loudness) per frame sent, from the first frame with either in it, and lines each
    full window up: ``add`` returns the window's offset in seconds (+ = mouth late) when it closes one in
    which the mouth follows the voice."""

    def __init__(self, fps: int, window_frames: int | None = None) -> None:
        self.fps = fps
        self.window = window_frames if window_frames is not None else 2 * fps
        if self.window < 2 * MAX_LAG_FRAMES + 2:
            raise ValueError(f"a window of {self.window} frames is too short to try lags of {MAX_LAG_FRAMES}")
        self._mouth: list[float] = []
        self._voice: list[float] = []

    def add(self, mouth: float, loudness: float) -> float | None:
        """One frame sent: the mouth envelope it was generated with, the loudness of its audio."""
        if not self._mouth and mouth <= 0 and loudness <= 0:
            return None  # silence and a closed mouth between speeches: nothing to line up
        self._mouth.append(mouth)
        self._voice.append(loudness)
        if len(self._mouth) < self.window:
            return None
        lag, r = best_lag(np.array(self._voice), np.array(self._mouth))
        self._mouth, self._voice = [], []
        return lag / self.fps if r >= MIN_CORRELATION else None
