"""Head gestures from face keypoints: a nod and a head shake fire once; a talking head, a lean, a still face
fire nothing; bad keypoints are refused with the field named."""

from __future__ import annotations

import numpy as np
import pytest

from events.errors import BadInput
from events.head_gestures import HeadGestureClassifier
from events.stamp import Stamper

EYES = 0.08
"""Eye distance of the made-up face, in picture widths."""


def face(dx: float = 0.0, dy: float = 0.0, turn: float = 0.0) -> np.ndarray:
    """The six keypoints of a face at the middle of the picture, moved by (dx, dy), its nose swung by
    ``turn`` eye distances to the side (a head turning)."""
    points = np.array([[-0.5, 0.0], [0.5, 0.0], [turn, 0.45], [0.0, 0.8], [-0.95, 0.3], [0.95, 0.3]]) * EYES
    return points + np.array([0.5 + dx, 0.4 + dy])


def frames(motion, seconds: float = 2.5, fps: float = 12.0, seed: int = 0) -> list[tuple[np.ndarray, float]]:
    """``motion(t)`` -> (dx, dy, turn) sampled at ``fps``, with a tracker's jitter."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(round(seconds * fps)):
        t = i / fps
        points = face(*motion(t))
        out.append((points + rng.normal(0.0, 0.002, points.shape), 1000.0 * t))
    return out


def classify(sequence) -> list[tuple[str, float]]:
    classifier = HeadGestureClassifier(Stamper("s"))
    return [(g.gesture, t) for points, t in sequence for g in classifier.feed(points, t)]


def swing(amplitude: float, hz: float):
    """A movement of ``amplitude`` eye distances at ``hz``, in picture widths."""
    return lambda t: amplitude * EYES * np.sin(2 * np.pi * hz * t)


@pytest.mark.parametrize("seed", range(3))
def test_a_nod_is_one_nod(seed: int) -> None:
    fired = classify(frames(lambda t: (0.0, swing(0.25, 1.8)(t), 0.0), seed=seed))
    assert [g for g, _ in fired] == ["nod"]
    assert fired[0][1] <= 1000.0


@pytest.mark.parametrize("seed", range(3))
def test_a_head_turning_side_to_side_is_one_shake(seed: int) -> None:
    fired = classify(frames(lambda t: (0.0, 0.0, 0.3 * np.sin(2 * np.pi * 1.6 * t)), seed=seed))
    assert [g for g, _ in fired] == ["shake_head"]


@pytest.mark.parametrize(
    "motion",
    [
        lambda t: (0.0, 0.0, 0.0),  # still
        lambda t: (swing(0.05, 2.7)(t), swing(0.05, 3.1)(t), 0.0),  # talking: small quick bobs
        lambda t: (0.0, min(t, 1.0) * 0.6 * EYES, 0.0),  # leaning in once
        lambda t: (swing(0.3, 1.0)(t), swing(0.3, 1.0)(t + 0.25), 0.0),  # circling: neither axis leads
    ],
    ids=["still", "talking", "lean", "circle"],
)
def test_heads_that_make_no_gesture_fire_nothing(motion) -> None:
    assert classify(frames(motion, seconds=4.0)) == []


def test_a_face_lost_for_a_moment_keeps_its_history_and_a_long_gap_ends_it() -> None:
    nod = frames(lambda t: (0.0, swing(0.25, 1.8)(t), 0.0), seconds=1.2)
    # One frame without a face in the middle of a nod: still a nod.
    holed = [(None if i == 6 else points, t) for i, (points, t) in enumerate(nod)]
    assert [g for g, _ in classify(holed)] == ["nod"]
    # Half a nod, half a second away, then the other half: no nod.
    apart = [(p, t) for p, t in nod if t < 500.0] + [(p, t + 600.0) for p, t in nod if t >= 500.0]
    assert classify(apart) == []


@pytest.mark.parametrize(
    "points",
    [np.zeros((5, 2)), np.zeros((6, 4)), np.full((6, 2), np.nan), [["a", "b"]] * 6],
    ids=["five", "four numbers", "nan", "text"],
)
def test_bad_keypoints_are_refused_naming_the_field(points) -> None:
    with pytest.raises(BadInput) as raised:
        HeadGestureClassifier(Stamper("s")).feed(points, 0.0)
    assert raised.value.field == "face"


def test_frames_must_move_forward_in_time() -> None:
    classifier = HeadGestureClassifier(Stamper("s"))
    classifier.feed(face(), 10.0)
    with pytest.raises(BadInput) as raised:
        classifier.feed(face(), 10.0)
    assert raised.value.field == "t_ms"
