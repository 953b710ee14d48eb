"""Head gestures: a nod or a head shake, recognised from a stream of face keypoints.

The keypoints are the six that MediaPipe Face Detection gives (normalised image coordinates, x to the
right, y down): right eye, left eye, nose tip, mouth centre, right ear, left ear. The nose tip follows the
head both when it turns (it swings past the eyes) and when it moves, so a nod is the nose going up and
down and a shake is it going side to side: at least ``reversals`` changes of direction, each a swing of at
least ``swing`` eye distances, within ``window_ms``, along an axis that moved ``dominance`` times more
than the other, on the track averaged over three frames (a detector's jitter is faster than any nod). Distances
are in eye distances, so the face's distance from the camera does not matter.
A talking head's small movements swing too little; a head that only moves once (leaning in) never
reverses.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import msgspec
import numpy as np

from events.gestures import Continuity, Onsets, Seen, TrackGaps, check_time, read_points, reversals
from events.stamp import Stamper
from events.vocabulary import Gesture

N_FACE_POINTS = 6
RIGHT_EYE, LEFT_EYE, NOSE = 0, 1, 2


class HeadConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Thresholds of the head-gesture classifier. Distances are in eye distances."""

    window_ms: float = 1500.0
    reversals: int = 2
    swing: float = 0.2
    dominance: float = 1.5
    """The gesture's axis moved (summed path) at least this many times as far as the other axis."""
    release_ms: float = 600.0
    gaps: TrackGaps = TrackGaps()
    """How long a face may be missing before its history starts afresh."""


def read_face(points: Sequence[Sequence[float]] | np.ndarray) -> np.ndarray:
    """Validate one face's keypoints and return them as a (6, 2) array of image x, y."""
    return read_points(points, "face", N_FACE_POINTS)


def _smoothed(values: np.ndarray) -> np.ndarray:
    """Each value averaged with its neighbours (the ends with theirs)."""
    if len(values) < 3:
        return values
    inner = (values[:-2] + values[1:-1] + values[2:]) / 3.0
    return np.concatenate([values[:1], inner, values[-1:]])


class HeadGestureClassifier:
    """Turns a stream of face keypoints into ``nod`` and ``shake_head`` ``Gesture`` events."""

    def __init__(self, stamper: Stamper, config: HeadConfig | None = None) -> None:
        self.config = config or HeadConfig()
        self._history: deque[tuple[float, float, float, float]] = (
            deque()
        )  # t_ms, nose x, nose y, eye distance
        self._onsets = Onsets(stamper, self.config.release_ms)
        self._continuity = Continuity(self.config.gaps)
        self._last_t: float | None = None

    def feed(self, face: Sequence[Sequence[float]] | np.ndarray | None, t_ms: float) -> list[Gesture]:
        """Take one frame at ``t_ms`` (``None`` when no face is seen); returns gestures that start now."""
        t_ms = check_time(t_ms, self._last_t)
        points = None if face is None else read_face(face)
        self._last_t = t_ms
        cfg = self.config
        if self._continuity.broken(points is not None, t_ms):
            self._history.clear()
        if points is not None:
            eyes = float(np.linalg.norm(points[RIGHT_EYE] - points[LEFT_EYE])) or 1e-6
            self._history.append((t_ms, float(points[NOSE, 0]), float(points[NOSE, 1]), eyes))
        while self._history and t_ms - self._history[0][0] > cfg.window_ms:
            self._history.popleft()
        return self._onsets.update(self._recognise(), t_ms)

    def _recognise(self) -> Seen:
        cfg = self.config
        if len(self._history) < 3:
            return {}
        _, xs, ys, eyes = (np.array(column) for column in zip(*self._history, strict=True))
        # Over three frames: a face detector's keypoints jitter from frame to frame (more so with a hand
        # near the face), far faster than a head nods or shakes.
        xs, ys = _smoothed(xs), _smoothed(ys)
        unit = float(np.median(eyes))
        path_x, path_y = float(np.abs(np.diff(xs)).sum()), float(np.abs(np.diff(ys)).sum())
        found: Seen = {}
        for name, along, path, across in (("nod", ys, path_y, path_x), ("shake_head", xs, path_x, path_y)):
            turns = reversals(along, cfg.swing * unit)
            if turns >= cfg.reversals and path >= cfg.dominance * across:
                found[name] = (min(1.0, turns / (cfg.reversals + 1)), float(xs[-1]), float(ys[-1]))
        return found
