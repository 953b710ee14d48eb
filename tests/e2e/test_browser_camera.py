"""The user's camera end to end: real headless Chromium with a video file as its camera, the page's real
hand and face models (MediaPipe, served by our server), a real server on loopback, the default model.

The footage is made, not filmed (tests/camera_footage.py says how and why): a real photograph of a person
whose head nods and shakes, and a drawn hand that waves, gives a thumbs up, points and is raised. Each of
those gestures must become its ``input.gesture`` event, seen in the footage where that gesture is, and the
character must react to each (a drawn frame whose ``reflects`` names it); no other gesture may be seen;
the page must send nothing but landmarks; and the camera goes off when the user says so.

The page is opened with ``?autostart=1&camera=1`` (the user's consent, given in the address), over the
WebSocket, with the microphone off.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import pytest_asyncio
from scipy.io import wavfile

from server.app import OnstageServer
from server.limits import Limits
from server.sessions import SessionFactory
from streaming_model.tiny import TinyBackend
from tests import camera_footage
from tests.e2e.browser import CHROMIUM, Page, serving_page
from tests.e2e.camera import watch_script, watched

pytestmark = [
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="no /usr/bin/chromium: run scripts/setup-browser"),
]

FOOTAGE = camera_footage.GESTURES
GESTURES = [name for name, _ in camera_footage.onsets(FOOTAGE)]
PASS_S = camera_footage.duration_s(FOOTAGE)
"""Chromium plays the footage in a loop; one pass holds each gesture once."""


def segments() -> dict[str, tuple[int, int]]:
    """Each gesture's frames in the footage, from its first to the last that may still complete it (its
    segment, and the frames after it that the page may not have looked at yet when it ended)."""
    out, frame = {}, 0
    for segment in FOOTAGE:
        frames = round(segment.seconds * camera_footage.FPS)
        if segment.what in GESTURES:
            out[segment.what] = (frame, frame + frames + camera_footage.FPS // 2)
        frame += frames
    return out


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def page(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("camera")
    footage = await asyncio.to_thread(camera_footage.write_y4m, tmp / "gestures.y4m", FOOTAGE)
    silence = tmp / "silence.wav"
    wavfile.write(silence, 16000, np.zeros(16000, dtype="<i2"))  # Chromium needs a microphone; it stays off
    server = OnstageServer(SessionFactory(TinyBackend.load()), Limits(max_sessions=1))
    flags = (f"--use-file-for-fake-video-capture={footage}",)
    query = "autostart=1&camera=1&seed=7&transport=ws"
    async with serving_page(server, query, silence, before_page=watch_script(), flags=flags) as page:
        yield page


async def test_each_gesture_in_the_footage_becomes_its_event_where_it_is_shown_and_the_character_reacts(
    page: Page,
) -> None:
    await page.wait_until("window.onstage && window.onstage.camera.on", timeout=30)

    async def all_reflected() -> bool:
        seen = (await watched(page)).seen()
        return all(any(s.gesture == g and s.reflected_ms is not None for s in seen) for g in GESTURES)

    # Two passes of the footage at most: a gesture the page missed in the first (it started the camera
    # part of the way through it) is in the second.
    try:
        async with asyncio.timeout(2 * PASS_S + 15):
            while not await all_reflected():  # noqa: ASYNC110 (polls the browser)
                await asyncio.sleep(0.5)
    except TimeoutError:
        watch = await watched(page)
        found = [(s.gesture, watch.frame_at(s.t_ms), s.reflected_ms is not None) for s in watch.seen()]
        raise AssertionError(f"seen (gesture, footage frame, reflected): {found}") from None
    watch = await watched(page)
    where = segments()
    for seen in watch.seen():
        frame = watch.frame_at(seen.t_ms)
        assert frame is not None, f"{seen} names a frame the page never looked at"
        first, last = where.get(seen.gesture, (0, -1))
        assert first <= frame <= last, f"{seen.gesture} seen at footage frame {frame}, not in {first}..{last}"
        if seen.reflected_ms is not None:
            assert seen.reflected_ms > seen.t_ms
    point = next(s for s in watch.seen() if s.gesture == "point")
    # The hand is on the picture's right; the page mirrors it as the user sees themselves: on their left.
    assert point.x is not None and point.x < 0.5


async def test_the_page_sends_only_landmarks_a_dozen_times_a_second_at_most(page: Page) -> None:
    await page.wait_until("window.onstage && window.onstage.camera.on", timeout=30)
    async with asyncio.timeout(30):  # two seconds of landmarks at least, whatever ran on the page before
        while len((await watched(page)).landmarks()) < 24:  # noqa: ASYNC110 (polls the browser)
            await asyncio.sleep(0.25)
    watch = await watched(page)
    texts = [m for m in watch.sent if isinstance(m, str)]
    assert len(texts) == len(watch.sent), "the page sent binary data (no microphone is on)"
    landmarks = watch.landmarks()
    assert len(landmarks) == len(texts) - 1  # and the session.start
    for message in landmarks:
        assert set(message) <= {"type", "t_ms", "hand", "face"}
        assert message["hand"] is None or len(message["hand"]) == 21
        assert message["face"] is None or len(message["face"]) == 6
    assert max(len(m) for m in texts) < 1024
    span_s = (landmarks[-1]["t_ms"] - landmarks[0]["t_ms"]) / 1000
    assert len(landmarks) <= 12.5 * span_s + 1


async def test_switching_the_camera_off_stops_it_and_its_landmarks(page: Page) -> None:
    await page.click("#camera")
    assert await page.evaluate("window.onstage.camera.on") is False
    assert await page.evaluate("document.getElementById('camera').textContent") == "Camera on"
    assert await page.evaluate("document.getElementById('self').srcObject") is None
    before = len((await watched(page)).landmarks())
    await asyncio.sleep(0.5)
    assert len((await watched(page)).landmarks()) == before


async def test_the_page_threw_no_errors(page: Page) -> None:
    assert page.errors == []
