"""Gestures: validation of client-reported gestures, and a classifier over hand-landmark sequences.

The classifier reads the 21 hand landmarks per frame that MediaPipe Hands gives (normalised image
coordinates, x to the right, y down, optional z) and recognises four gestures:

- ``point``: the index finger extended, the other three curled, held for ``hold_ms``.
- ``thumbs_up``: a fist with the thumb extended and pointing up, held for ``hold_ms``.
- ``raise_hand``: an open palm, all five fingers out, upright and still, held for ``raise_hold_ms``.
- ``wave``: an open palm swinging side to side, at least ``wave_reversals`` changes of direction of at
  least ``wave_swing`` hand sizes within ``wave_window_ms``.

Each gesture fires once when it starts and again only after it has been absent for ``release_ms``.
Fingers are judged by distances relative to the hand's own size, so the hand's distance from the camera
and its rotation in the image do not matter.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence

import msgspec
import numpy as np

from events.errors import BadInput
from events.stamp import Stamper
from events.vocabulary import Gesture

KNOWN_GESTURES = frozenset({"wave", "point", "thumbs_up", "raise_hand", "nod", "shake_head"})

WRIST = 0
THUMB = (1, 2, 3, 4)  # CMC, MCP, IP, tip
FINGERS = ((5, 6, 7, 8), (9, 10, 11, 12), (13, 14, 15, 16), (17, 18, 19, 20))  # MCP, PIP, DIP, tip
INDEX_TIP = 8
N_LANDMARKS = 21


def client_gesture(
    stamper: Stamper,
    gesture: str,
    confidence: float = 1.0,
    x: float | None = None,
    y: float | None = None,
    known: frozenset[str] = KNOWN_GESTURES,
) -> Gesture:
    """A gesture reported by a client, checked field by field (``BadInput`` names the bad one)."""
    if not isinstance(gesture, str) or gesture not in known:
        raise BadInput("gesture", f"unknown gesture {gesture!r}; known: {', '.join(sorted(known))}")
    for name, value in (("confidence", confidence), ("x", x), ("y", y)):
        if value is None and name != "confidence":
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
            raise BadInput(name, f"must be a number from 0 to 1, got {value!r}")
    return stamper(Gesture, gesture=gesture, confidence=float(confidence), x=x, y=y, source="client")


class TrackGaps(msgspec.Struct, frozen=True, kw_only=True):
    """How long a tracked hand or face may be missing before it counts as a new sighting
    (``Continuity``)."""

    max_gap_ms: float = 250.0
    """Missing from two frames or more in a row for longer than this (it left the picture, or the
    tracker lost it) starts the history afresh."""
    max_unseen_ms: float = 500.0
    """So does being unseen for longer than this, whatever came between (one frame without it, or none)."""


class GestureConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Thresholds of the landmark classifier. Distances are in hand sizes (wrist to middle-finger MCP)."""

    finger_extended: float = 1.4
    """A finger is extended when its tip is this many times farther from the wrist than its MCP joint."""
    thumb_extended: float = 0.65
    """The thumb is extended when its tip is this far (hand sizes) from the centre of the palm."""
    thumb_up_cos: float = 0.75
    """The thumb points up when its direction is within ~40 degrees of image-up."""
    upright_cos: float = 0.5
    """An open palm is upright when wrist-to-middle-MCP is within 60 degrees of image-up."""
    hold_ms: float = 300.0
    raise_hold_ms: float = 600.0
    held_share: float = 0.7
    """A pose is held when at least this share of the frames over its hold show it (and the newest does);
    a frame without a hand does not."""
    still_swing: float = 0.15
    """A raised hand is still when the palm moved less than this (hand sizes, peak to peak) while held."""
    wave_window_ms: float = 1500.0
    wave_reversals: int = 2
    wave_swing: float = 0.35
    release_ms: float = 500.0
    min_size: float = 0.1
    """A hand smaller than this (wrist to middle-finger MCP, in picture units) is not judged: too far away
    to tell its fingers apart, or a tracker's misreading of something else."""
    gaps: TrackGaps = TrackGaps()
    """How long a hand may be missing before its history starts afresh."""


class HandPose(msgspec.Struct, frozen=True):
    """What one frame of landmarks shows."""

    t_ms: float
    palm_x: float
    palm_y: float
    size: float
    fingers: tuple[bool, bool, bool, bool]
    thumb_extended: bool
    thumb_up: bool
    upright: bool
    index_tip: tuple[float, float]

    @property
    def open_palm(self) -> bool:
        return all(self.fingers)

    @property
    def pointing(self) -> bool:
        return self.fingers[0] and not any(self.fingers[1:])

    @property
    def thumbs_up(self) -> bool:
        return not any(self.fingers) and self.thumb_extended and self.thumb_up


def read_points(points: Sequence[Sequence[float]] | np.ndarray, field: str, count: int) -> np.ndarray:
    """Validate ``count`` points of (x, y[, z]) and return them as a (count, 2) array of image x, y
    (``BadInput`` naming ``field`` otherwise)."""
    try:
        arr = np.asarray(points, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise BadInput(field, f"not a numeric array: {exc}") from None
    if arr.ndim != 2 or arr.shape[0] != count or arr.shape[1] not in (2, 3):
        raise BadInput(field, f"expected {count} points of (x, y[, z]), got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise BadInput(field, "NaN or infinite coordinates")
    return arr[:, :2]


def read_landmarks(landmarks: Sequence[Sequence[float]] | np.ndarray) -> np.ndarray:
    """Validate one hand's landmarks and return them as a (21, 2) array of image x, y."""
    return read_points(landmarks, "landmarks", N_LANDMARKS)


def hand_pose(points: np.ndarray, t_ms: float, config: GestureConfig) -> HandPose:
    """Judge fingers, thumb and orientation of one validated (21, 2) landmark frame."""
    wrist = points[WRIST]
    size = float(np.linalg.norm(points[FINGERS[1][0]] - wrist)) or 1e-6
    fingers = tuple(
        bool(
            np.linalg.norm(points[tip] - wrist) > config.finger_extended * np.linalg.norm(points[mcp] - wrist)
        )
        for mcp, _, _, tip in FINGERS
    )
    palm = points[[WRIST, FINGERS[0][0], FINGERS[1][0], FINGERS[3][0]]].mean(axis=0)
    thumb_tip, thumb_mcp = points[THUMB[3]], points[THUMB[1]]
    thumb_extended = bool(np.linalg.norm(thumb_tip - palm) > config.thumb_extended * size)
    thumb_dir = thumb_tip - thumb_mcp
    thumb_up = bool(-thumb_dir[1] > config.thumb_up_cos * (np.linalg.norm(thumb_dir) or 1e-6))
    up = points[FINGERS[1][0]] - wrist
    return HandPose(
        t_ms=t_ms,
        palm_x=float(palm[0]),
        palm_y=float(palm[1]),
        size=size,
        fingers=fingers,  # type: ignore[arg-type]  # one per entry of FINGERS: four
        thumb_extended=thumb_extended,
        thumb_up=thumb_up,
        upright=bool(-up[1] > config.upright_cos * size),
        index_tip=(float(points[INDEX_TIP][0]), float(points[INDEX_TIP][1])),
    )


def reversals(xs: np.ndarray, min_swing: float) -> int:
    """Changes of direction in ``xs`` whose swings are each at least ``min_swing`` (a zigzag count).

    The first swing only sets the direction; every later swing the other way is one reversal.
    """
    count, direction, high, low = 0, 0, xs[0], xs[0]
    for x in xs[1:]:
        if direction >= 0:
            high = max(high, x)
        if direction <= 0:
            low = min(low, x)
        if direction >= 0 and high - x >= min_swing:
            count += direction > 0
            direction, low = -1, x
        elif direction <= 0 and x - low >= min_swing:
            count += direction < 0
            direction, high = 1, x
    return count


def check_time(t_ms: object, last_t: float | None) -> float:
    """A frame's time as a float: finite and after ``last_t`` (``BadInput`` naming ``t_ms`` otherwise)."""
    if isinstance(t_ms, bool) or not isinstance(t_ms, int | float) or not math.isfinite(t_ms):
        raise BadInput("t_ms", f"must be a finite number, got {t_ms!r}")
    if last_t is not None and t_ms <= last_t:
        raise BadInput("t_ms", f"frames must move forward in time: {t_ms} after {last_t}")
    return float(t_ms)


class Continuity:
    """Whether a hand (or a face) in a new frame is still the one of the frames before, so that their
    history goes on, or a new sighting, so that it starts afresh.

    A frame without it alone does not end the sighting, however long after the last frame it comes: at a
    few frames a second (a loaded machine) a tracker loses a fast-moving hand in every other frame, as it
    looks for it where it was, and its detector finds it again in the next. Missing from two frames or
    more in a row for longer than ``max_gap_ms`` ends it, and so does being unseen for longer than
    ``max_unseen_ms`` (frames or not), both from ``TrackGaps``."""

    def __init__(self, gaps: TrackGaps) -> None:
        self.gaps = gaps
        self._seen_ms: float | None = None
        self._missed = 0

    def broken(self, seen: bool, t_ms: float) -> bool:
        """Take a frame at ``t_ms`` that shows it (``seen``) or not: whether the sighting ended before it."""
        broken = False
        if self._seen_ms is not None:
            unseen_ms = t_ms - self._seen_ms
            missed = self._missed + (not seen)
            broken = unseen_ms > self.gaps.max_unseen_ms or (missed >= 2 and unseen_ms > self.gaps.max_gap_ms)
        if seen:
            self._seen_ms, self._missed = t_ms, 0
        else:
            self._missed += 1
        return broken


Seen = dict[str, tuple[float, float, float]]
"""Gestures visible in a frame, each with (confidence, x, y)."""


class Onsets:
    """Which visible gestures start now: each fires when it appears and again only once it has been out
    of sight for ``release_ms``, so a gesture held or repeated without a pause is one event."""

    def __init__(self, stamper: Stamper, release_ms: float) -> None:
        self.stamper = stamper
        self.release_ms = release_ms
        self._last_seen: dict[str, float] = {}
        self._active: set[str] = set()

    def update(self, found: Seen, t_ms: float) -> list[Gesture]:
        """The ``Gesture`` events (``source="landmarks"``) of what ``found`` shows for the first time."""
        events = []
        for name, (confidence, x, y) in found.items():
            self._last_seen[name] = t_ms
            if name not in self._active:
                self._active.add(name)
                events.append(
                    self.stamper(
                        Gesture,
                        gesture=name,
                        confidence=round(confidence, 3),
                        x=min(1.0, max(0.0, x)),
                        y=min(1.0, max(0.0, y)),
                        source="landmarks",
                    )
                )
        for name in list(self._active):
            if t_ms - self._last_seen[name] >= self.release_ms:
                self._active.discard(name)
        return events


class LandmarkGestureClassifier:
    """Turns a stream of hand-landmark frames into ``Gesture`` events (``source="landmarks"``)."""

    def __init__(self, stamper: Stamper, config: GestureConfig | None = None) -> None:
        self.stamper = stamper
        self.config = config or GestureConfig()
        self._history: deque[HandPose] = deque()
        self._missed: deque[float] = deque()
        """When frames of the current sighting showed no hand (a tracker's flicker)."""
        self._onsets = Onsets(stamper, self.config.release_ms)
        self._continuity = Continuity(self.config.gaps)
        self._last_t: float | None = None

    def feed(self, landmarks: Sequence[Sequence[float]] | np.ndarray | None, t_ms: float) -> list[Gesture]:
        """Take one frame at ``t_ms`` (``None`` when no hand is seen); returns gestures that start now."""
        t_ms = check_time(t_ms, self._last_t)
        points = None if landmarks is None else read_landmarks(landmarks)
        self._last_t = t_ms
        cfg = self.config
        pose = None if points is None else hand_pose(points, t_ms, cfg)
        if pose is not None and pose.size < cfg.min_size:
            pose = None  # not judged: as if no hand were seen
        if self._continuity.broken(pose is not None, t_ms):
            self._history.clear()
            self._missed.clear()
        if pose is not None:
            self._history.append(pose)
        elif self._history:
            self._missed.append(t_ms)
        horizon = max(cfg.wave_window_ms, cfg.raise_hold_ms, cfg.hold_ms)
        while self._history and t_ms - self._history[0].t_ms > horizon:
            self._history.popleft()
        while self._missed and t_ms - self._missed[0] > horizon:
            self._missed.popleft()
        return self._onsets.update(self._recognise(t_ms), t_ms)

    def _held(self, t_ms: float, span_ms: float, test) -> tuple[list[HandPose], float]:
        """The poses of the last ``span_ms`` that pass ``test``, and their share of all its poses: when
        the hand was seen all the span, the newest pose passes, at least ``held_share`` of them pass (a
        tracker misjudges a finger now and then) and those span half of it at least; else none."""
        # The history is unbroken (a gap empties it), so the hand was seen all along when its oldest pose
        # is old enough: at a dozen frames a second the poses inside the span need not reach its start.
        if not self._history or t_ms - self._history[0].t_ms < span_ms * 0.9:
            return [], 0.0
        poses = [p for p in self._history if t_ms - p.t_ms <= span_ms]
        if not poses or not test(poses[-1]):
            return [], 0.0
        passing = [p for p in poses if test(p)]
        # A frame without the hand does not show the pose either: a hand lost in every other frame is
        # moving (the tracker loses a quick hand), and the frames it is seen in, at the slow ends of its
        # swings, would look still.
        missed = sum(1 for t in self._missed if t_ms - t <= span_ms)
        share = len(passing) / (len(poses) + missed)
        if share < self.config.held_share or passing[-1].t_ms - passing[0].t_ms < span_ms / 2:
            return [], 0.0  # too few of the frames, or seen in too short a part of the span
        return passing, share

    def _recognise(self, t_ms: float) -> Seen:
        """Gestures visible now, each with (confidence, x, y)."""
        cfg = self.config
        found: Seen = {}
        if not self._history:
            return found
        window = [p for p in self._history if t_ms - p.t_ms <= cfg.wave_window_ms]
        size = float(np.median([p.size for p in window]))
        open_poses = [p for p in window if p.open_palm or sum(p.fingers) >= 3]
        if len(open_poses) >= 0.8 * len(window) and len(window) >= 3:
            xs = np.array([p.palm_x for p in open_poses])
            turns = reversals(xs, cfg.wave_swing * size)
            if turns >= cfg.wave_reversals:
                last = open_poses[-1]
                found["wave"] = (min(1.0, turns / (cfg.wave_reversals + 1)), last.palm_x, last.palm_y)
        raised, share = self._held(
            t_ms, cfg.raise_hold_ms, lambda p: p.open_palm and p.thumb_extended and p.upright
        )
        if raised and "wave" not in found:
            xs = np.array([p.palm_x for p in raised])
            if np.ptp(xs) < cfg.still_swing * size:
                found["raise_hand"] = (share, raised[-1].palm_x, raised[-1].palm_y)
        pointing, share = self._held(t_ms, cfg.hold_ms, lambda p: p.pointing)
        if pointing:
            found["point"] = (share, *pointing[-1].index_tip)
        thumbs, share = self._held(t_ms, cfg.hold_ms, lambda p: p.thumbs_up)
        if thumbs:
            found["thumbs_up"] = (share, thumbs[-1].palm_x, thumbs[-1].palm_y)
        return found
