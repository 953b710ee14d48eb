"""Gestures: client reports are validated; hand-landmark sequences become wave, raise_hand, point, thumbs_up."""

from __future__ import annotations

import numpy as np
import pytest

from events.errors import BadInput
from events.gestures import Continuity, LandmarkGestureClassifier, TrackGaps, client_gesture
from events.stamp import Stamper
from tests import hands


def classify(frames, classifier: LandmarkGestureClassifier | None = None) -> list[tuple[str, float]]:
    """Feed frames; return (gesture, t_ms of the frame that fired it)."""
    classifier = classifier or LandmarkGestureClassifier(Stamper("s"))
    out = []
    for landmarks, t_ms in frames:
        out += [(g.gesture, t_ms) for g in classifier.feed(landmarks, t_ms)]
    return out


@pytest.mark.parametrize("seed", range(5))
def test_an_open_palm_swinging_side_to_side_is_one_wave(seed: int) -> None:
    frames = hands.sequence(hands.OPEN, seconds=2.5, sway_x=0.05, sway_hz=2.0, seed=seed)
    fired = classify(frames)
    assert [g for g, _ in fired] == ["wave"]
    assert fired[0][1] <= 1200.0


@pytest.mark.parametrize("roll", [-20.0, 0.0, 25.0])
def test_a_still_upright_open_palm_is_a_raised_hand_not_a_wave(roll: float) -> None:
    frames = hands.sequence(hands.OPEN, seconds=1.5, roll_deg=roll, seed=3)
    fired = classify(frames)
    assert [g for g, _ in fired] == ["raise_hand"]
    assert 540.0 <= fired[0][1] <= 900.0  # held for raise_hold_ms (600), give or take a frame


def test_an_extended_index_finger_is_a_point_at_the_fingertip() -> None:
    classifier = LandmarkGestureClassifier(Stamper("s"))
    events = []
    for landmarks, t_ms in hands.sequence(hands.POINT, seconds=1.0, x=0.3, y=0.6, seed=1):
        events += classifier.feed(landmarks, t_ms)
    assert [e.gesture for e in events] == ["point"]
    tip = hands.hand(**hands.POINT, x=0.3, y=0.6)[8]
    assert events[0].x == pytest.approx(tip[0], abs=0.02) and events[0].y == pytest.approx(tip[1], abs=0.02)
    assert events[0].source == "landmarks"


def test_a_fist_with_the_thumb_up_is_a_thumbs_up() -> None:
    assert [g for g, _ in classify(hands.sequence(hands.THUMBS_UP, seconds=1.0, seed=2))] == ["thumbs_up"]


@pytest.mark.parametrize(
    "frames",
    [
        hands.sequence(hands.FIST, seconds=2.0, seed=4),
        hands.sequence(hands.FIST, seconds=2.0, sway_x=0.05, seed=5),
        hands.sequence(hands.OPEN, seconds=1.5, drift_x=0.3, seed=6),
        [(None, 33.3 * i) for i in range(60)],
    ],
    ids=["still fist", "shaken fist", "one sweep of an open palm", "no hand"],
)
def test_hands_that_make_no_gesture_fire_nothing(frames) -> None:
    assert classify(frames) == []


def test_a_gesture_fires_again_only_after_it_was_released() -> None:
    frames: list[tuple[np.ndarray | None, float]] = [*hands.sequence(hands.THUMBS_UP, seconds=1.0, seed=7)]
    frames += [(None, 1000.0 + 33.3 * i) for i in range(1, 30)]
    frames += hands.sequence(hands.THUMBS_UP, seconds=1.0, seed=8, start_ms=2000.0)
    assert [g for g, _ in classify(frames)] == ["thumbs_up", "thumbs_up"]


@pytest.mark.parametrize("seed", range(3))
def test_a_wave_seen_at_a_few_frames_a_second_with_the_hand_lost_in_every_other_one_is_one_wave(
    seed: int,
) -> None:
    # A loaded machine's page: 7 frames a second, the tracker losing the swinging hand in every other
    # frame, so that the frames with a hand are 286 ms apart.
    frames = hands.sequence(hands.OPEN, seconds=2.5, fps=7.0, sway_x=0.05, sway_hz=1.5, seed=seed)
    holed = [(None if i % 2 else landmarks, t_ms) for i, (landmarks, t_ms) in enumerate(frames)]
    assert [g for g, _ in classify(holed)] == ["wave"]


def test_a_hand_seen_only_in_every_other_frame_at_the_same_end_of_its_swing_is_not_a_raised_hand() -> None:
    # A wave that a slow page samples in step with it: the tracker loses the quick hand between the ends of
    # its swings, and each frame that finds it finds it at the same end. It looks still, but it is not
    # seen still: the frames without it count against the hold.
    frames = hands.sequence(hands.OPEN, seconds=2.0, fps=4.0, seed=5)
    holed = [(None if i % 2 else landmarks, t_ms) for i, (landmarks, t_ms) in enumerate(frames)]
    assert classify(holed) == []
    assert [g for g, _ in classify(frames)] == ["raise_hand"]  # the same hand in every frame: raised


@pytest.mark.parametrize(
    ("hole", "shift_ms", "fired"),
    [
        ([(None, 700.0)], 400.0, ["wave"]),
        ([(None, 600.0), (None, 700.0), (None, 800.0)], 400.0, []),
        ([(None, 800.0)], 600.0, []),
        ([], 600.0, []),
    ],
    ids=[
        "lost in one frame: the same hand",
        "missing from three frames: gone",
        "unseen for over half a second with a frame between: gone",
        "unseen for over half a second without frames: gone",
    ],
)
def test_a_hand_that_was_gone_between_two_halves_of_a_wave_starts_a_new_history(
    hole: list, shift_ms: float, fired: list[str]
) -> None:
    wave = hands.sequence(hands.OPEN, seconds=1.0, sway_x=0.05, sway_hz=2.0, seed=4)
    first, second = [(p, t) for p, t in wave if t < 500.0], [(p, t + shift_ms) for p, t in wave if t >= 500.0]
    assert classify(first) == [] and classify([(p, t - second[0][1]) for p, t in second]) == []
    assert [g for g, _ in classify([*first, *hole, *second])] == fired


@pytest.mark.parametrize(
    ("frames", "broken"),
    [
        ([(True, 0.0), (False, 300.0), (True, 450.0)], False),  # lost in one frame: a tracker's flicker
        ([(True, 0.0), (False, 100.0), (False, 200.0), (True, 240.0)], False),  # two frames, but briefly
        ([(True, 0.0), (False, 100.0), (False, 260.0)], True),  # missing from two frames, for long
        ([(True, 0.0), (False, 300.0), (True, 520.0)], True),  # unseen over half a second
        ([(True, 0.0), (True, 510.0)], True),  # no frames over half a second
    ],
)
def test_a_sighting_ends_when_missing_from_two_frames_for_long_or_unseen_for_long(
    frames: list[tuple[bool, float]], broken: bool
) -> None:
    continuity = Continuity(TrackGaps(max_gap_ms=250.0, max_unseen_ms=500.0))
    answers = [continuity.broken(seen, t_ms) for seen, t_ms in frames]
    assert answers[:-1] == [False] * (len(frames) - 1) and answers[-1] is broken


def test_bad_landmark_frames_are_refused_and_the_gesture_still_lands() -> None:
    classifier = LandmarkGestureClassifier(Stamper("s"))
    frames = hands.sequence(hands.OPEN, seconds=2.5, sway_x=0.05, seed=9)
    fired, bad = [], 0
    for i, (landmarks, t_ms) in enumerate(frames):
        if i % 10 == 5:
            for broken in (
                landmarks[:20],
                np.full((21, 3), np.nan),
                "not landmarks",
                [[0.1, 0.2, 0.3, 0.4]] * 21,
            ):
                with pytest.raises(BadInput) as err:
                    classifier.feed(broken, t_ms - 1.0)  # type: ignore[arg-type]  # wrong on purpose
                assert err.value.field == "landmarks"
                bad += 1
        fired += [g.gesture for g in classifier.feed(landmarks, t_ms)]
    assert bad > 0 and fired == ["wave"]


def test_frames_that_go_back_in_time_are_refused() -> None:
    classifier = LandmarkGestureClassifier(Stamper("s"))
    classifier.feed(hands.hand(), 100.0)
    for t in (100.0, 50.0, float("nan")):
        with pytest.raises(BadInput, match="t_ms"):
            classifier.feed(hands.hand(), t)


def test_a_valid_client_gesture_becomes_an_event() -> None:
    event = client_gesture(Stamper("s"), "wave", confidence=0.7, x=0.25, y=0.5)
    assert (event.gesture, event.confidence, event.x, event.y, event.source) == (
        "wave",
        0.7,
        0.25,
        0.5,
        "client",
    )


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"gesture": "moonwalk"}, "gesture"),
        ({"gesture": 3}, "gesture"),
        ({"gesture": "wave", "confidence": 1.5}, "confidence"),
        ({"gesture": "wave", "confidence": True}, "confidence"),
        ({"gesture": "wave", "x": -0.1}, "x"),
        ({"gesture": "wave", "y": "top"}, "y"),
        ({"gesture": "wave", "x": float("nan")}, "x"),
    ],
)
def test_a_malformed_client_gesture_names_the_bad_field(kwargs: dict, field: str) -> None:
    with pytest.raises(BadInput) as err:
        client_gesture(Stamper("s"), **kwargs)
    assert err.value.field == field
