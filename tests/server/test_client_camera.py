"""``input.landmarks`` over a real WebSocket: frames of a hand and a face become gesture events that the
character answers as it answers the gesture buttons; bad frames are refused one by one, and the session
streams on.

The frames are sent faster than real time: the classifiers read the frames' own ``t_ms``, not when they
arrive.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from server import protocol as p
from server.client import SessionClient
from tests import hands
from tests.events.test_head_gestures import face

live = pytest.mark.asyncio(loop_scope="module")
"""Tests of a live session share the module's server and its event loop."""


def landmarks(t_ms: float, hand: np.ndarray | None = None, head: np.ndarray | None = None) -> dict:
    return {
        "type": "input.landmarks",
        "t_ms": t_ms,
        "hand": None if hand is None else hand[:, :2].round(4).tolist(),
        "face": None if head is None else head.round(4).tolist(),
    }


@live
async def test_a_wave_and_a_nod_in_landmarks_become_gestures_the_character_answers(url: str) -> None:
    async with SessionClient(url) as client:
        await client.start(seed=3, director="none")
        await client.wait_frame(lambda f: True, timeout=30)
        wave = hands.sequence(hands.OPEN, seconds=1.5, fps=12.0, sway_x=0.05, seed=1, start_ms=1000.0)
        for i, (hand, t_ms) in enumerate(wave):
            await client.send({**landmarks(t_ms, hand, face()), "ref": f"w{i}"})
        waved = await client.wait_type("input.gesture", gesture="wave")
        assert waved["ref"].startswith("w") and waved["t_ms"] <= 1000.0 + 1500.0
        nod = [face(dy=0.25 * 0.08 * np.sin(2 * np.pi * 1.8 * i / 12)) for i in range(24)]
        for i, head in enumerate(nod):
            await client.send(landmarks(3000.0 + 1000.0 * i / 12, head=head))
        nodded = await client.wait_type("input.gesture", gesture="nod")
        for told in (waved, nodded):
            await client.wait_frame(lambda f, e=told["event_id"]: e in f.header.get("reflects", ()), 15)
        assert [m["gesture"] for m in client.received.of_type("input.gesture")] == ["wave", "nod"]
        assert not client.received.of_type("error")


@pytest.mark.parametrize(
    ("frame", "field"),
    [
        ({"t_ms": 5.0, "hand": [[0.5, 0.5]] * 20}, "hand"),
        ({"t_ms": 5.0, "face": [[0.5, 0.5]] * 6 + [[0.5, 0.5]]}, "face"),
        ({"t_ms": 5.0, "face": [[0.5, 9.0]] * 6}, "face"),
        ({"t_ms": 5.0, "hand": [[0.5, "x"]] * 21}, "hand"),
        ({"t_ms": -1.0}, "t_ms"),
        ({"t_ms": 1e13}, "t_ms"),
        ({"hand": None}, "t_ms"),
    ],
    ids=["20 points", "7 points", "off the picture", "text", "negative time", "far future", "no time"],
)
def test_bad_frames_are_refused_naming_the_field(frame: dict, field: str) -> None:
    with pytest.raises(p.ProtocolError) as raised:
        p.decode_client_text(json.dumps({"type": "input.landmarks", **frame, "ref": "r"}))
    assert raised.value.code == p.ErrorCode.BAD_FIELD and raised.value.ref == "r"
    assert field in raised.value.message


@live
async def test_a_frame_back_in_time_is_refused_and_the_camera_goes_on(url: str) -> None:
    async with SessionClient(url) as client:
        await client.start(seed=4, director="none")
        await client.wait_frame(lambda f: True, timeout=30)
        await client.send({**landmarks(500.0, head=face()), "ref": "first"})
        await client.send({**landmarks(400.0, head=face()), "ref": "back"})
        refused = await client.wait_for(lambda m: m.get("ref") == "back")
        assert refused["type"] == "error" and refused["code"] == "bad_field" and not refused["fatal"]
        assert "t_ms" in refused["message"]
        for i in range(1, 25):  # after the refused frame: a nod from where the camera was
            head = face(dy=0.25 * 0.08 * np.sin(2 * np.pi * 1.8 * i / 12))
            await client.send(landmarks(500.0 + 1000.0 * i / 12, head=head))
        await client.wait_type("input.gesture", gesture="nod")
        assert [m.get("ref") for m in client.received.of_type("error")] == ["back"]
