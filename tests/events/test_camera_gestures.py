"""Gestures from real landmarks: what MediaPipe's hand and face models, run by the page in headless
Chromium, saw in the camera footage of tests/camera_footage.py, one pass of each footage as the page sent
it (recorded by ``benchmarks/camera.py --record tests/data/camera``; each frame names the footage frame it
came from). Each gesture of the footage fires once, in its own part of the footage; the footage without
gestures fires nothing.

Each footage is recorded twice: on an idle machine (the page looked at 12 frames a second) and on a loaded
one (``scripts/loaded``, ``--record-suffix _loaded``: 8.5 frames a second, and the tracker lost the
waving hand in 13 of its 22 frames, so that the frames with a hand were up to 271 ms apart).
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from events.gestures import LandmarkGestureClassifier
from events.head_gestures import HeadGestureClassifier
from events.stamp import Stamper
from events.vocabulary import Gesture
from tests import camera_footage

DATA = Path(__file__).parents[1] / "data" / "camera"
LATE_FRAMES = camera_footage.FPS // 2
"""A gesture may complete this long after its part of the footage ends (the page looks at every other
frame or so)."""


def recording(name: str) -> list[dict[str, Any]]:
    return json.loads((DATA / f"{name}.json").read_text())["frames"]


def replay(frames: list[dict[str, Any]]) -> list[tuple[Gesture, int]]:
    """Every gesture the two classifiers fire, with the footage frame of the landmarks that fired it."""
    stamper = Stamper("s")
    hands, head = LandmarkGestureClassifier(stamper), HeadGestureClassifier(stamper)
    fired = []
    for frame in frames:
        for gesture in hands.feed(frame["hand"], frame["t_ms"]) + head.feed(frame["face"], frame["t_ms"]):
            fired.append((gesture, frame["frame"]))
    return fired


def parts(script: tuple[camera_footage.Segment, ...]) -> dict[str, range]:
    """Each gesture's frames in the footage, and a few after."""
    out, start = {}, 0
    for segment in script:
        n = round(segment.seconds * camera_footage.FPS)
        out[segment.what] = range(start, start + n + LATE_FRAMES)
        start += n
    return out


MACHINES = pytest.mark.parametrize("machine", ["", "_loaded"], ids=["idle machine", "loaded machine"])


@MACHINES
def test_the_recordings_are_whole_passes_of_their_footage(machine: str) -> None:
    for name, script in (("gestures", camera_footage.GESTURES), ("no_gestures", camera_footage.NO_GESTURES)):
        frames = recording(name + machine)
        total = round(camera_footage.duration_s(script) * camera_footage.FPS)
        assert frames[0]["frame"] < camera_footage.FPS and frames[-1]["frame"] >= total - camera_footage.FPS
        assert all(a["t_ms"] < b["t_ms"] for a, b in itertools.pairwise(frames))


@MACHINES
def test_each_gesture_of_the_footage_fires_once_in_its_own_part(machine: str) -> None:
    fired = replay(recording("gestures" + machine))
    where = parts(camera_footage.GESTURES)
    assert sorted(g.gesture for g, _ in fired) == sorted(
        name for name, _ in camera_footage.onsets(camera_footage.GESTURES)
    )
    for gesture, frame in fired:
        assert frame in where[gesture.gesture], (gesture.gesture, frame)
        assert gesture.source == "landmarks" and 0.0 <= gesture.x <= 1.0 and 0.0 <= gesture.y <= 1.0  # type: ignore[operator]


@MACHINES
def test_the_point_is_where_the_fingertip_is(machine: str) -> None:
    frames = recording("gestures" + machine)
    ((point, frame),) = [(g, f) for g, f in replay(frames) if g.gesture == "point"]
    tip = next(f["hand"][8] for f in reversed(frames) if f["frame"] <= frame and f["hand"] is not None)
    assert (point.x, point.y) == pytest.approx(tuple(tip), abs=1e-6)


@MACHINES
def test_the_footage_without_gestures_fires_nothing(machine: str) -> None:
    assert [(g.gesture, f) for g, f in replay(recording("no_gestures" + machine))] == []
