"""The browser page end to end: a real server, real headless Chromium, a WAV file as the microphone.

The page is opened with ``?autostart=1&mic=1``, so it calls and streams the microphone by itself. The test
reads what a user would see: the status line, the canvas's pixels, the frame counter and the event log.
A screenshot goes to ``/tmp/onstage-browser.png`` for a human look.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import numpy as np
import pytest
import pytest_asyncio

from events.hearing import Hearing
from server.app import OnstageServer
from server.limits import Limits
from server.sessions import SessionFactory
from streaming_model.tiny import TinyBackend
from tests.e2e.browser import (
    CHROMIUM,
    Page,
    chunks_sent,
    event_ids,
    microphone_wav,
    reflected,
    serving_page,
    wait_for_log,
)

pytestmark = [
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="no /usr/bin/chromium: run scripts/setup-browser"),
]

SCREENSHOT = Path("/tmp/onstage-browser.png")


CHUNK_FRAMES = 4
"""Frames per chunk of the default model, which this page's server runs."""


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def page(tmp_path_factory: pytest.TempPathFactory):
    factory = SessionFactory(TinyBackend.load(), hearing=Hearing())
    server = OnstageServer(factory, Limits(max_sessions=1))
    wav = microphone_wav(tmp_path_factory.mktemp("mic") / "speech-and-knocks.wav")
    async with serving_page(server, "autostart=1&mic=1&seed=7&transport=ws", wav) as page:
        yield page


async def test_the_page_connects_and_draws_every_frame_the_server_sends_and_they_are_not_blank(
    page: Page,
) -> None:
    await page.wait_until("window.onstage && window.onstage.started !== null")
    assert await page.evaluate("document.getElementById('status').dataset.state") == "live"
    first = await page.wait_until("window.onstage.framesDrawn >= 12 && window.onstage.framesDrawn")
    origin = await page.evaluate("window.location.origin")
    sent_before = await asyncio.to_thread(chunks_sent, origin)
    start = time.monotonic()
    await asyncio.sleep(2.0)
    drawn = await page.evaluate("window.onstage.framesDrawn")
    sent = (await asyncio.to_thread(chunks_sent, origin) - sent_before) * CHUNK_FRAMES
    seconds = time.monotonic() - start
    # The page draws every frame the server sends (24 a second on a quiet machine; fewer on a loaded one,
    # where the model is slower than real time), and never more than real time.
    assert sent > 0 and drawn - first >= 0.8 * sent - CHUNK_FRAMES, (drawn - first, sent)
    assert (drawn - first) / seconds <= 30, f"{(drawn - first) / seconds:.1f} frames drawn per second"
    assert int(await page.evaluate("document.getElementById('frames').textContent")) >= drawn
    width, height = await page.evaluate("[window.onstage.started.width, window.onstage.started.height]")
    screen = "document.getElementById('screen')"
    assert await page.evaluate(f"[{screen}.width, {screen}.height]") == [width, height]
    pixels = await page.evaluate(
        f"Array.from({screen}.getContext('2d').getImageData(0, 0, {width}, {height}).data)"
    )
    rgb = np.asarray(pixels, dtype=np.float32).reshape(height, width, 4)[..., :3]
    assert rgb.std() > 10.0, "the canvas is blank (one flat colour)"
    assert len(np.unique(rgb.reshape(-1, 3) // 32, axis=0)) >= 4, "the canvas shows hardly any colours"


async def test_speech_and_knocks_in_the_microphone_are_heard_and_a_frame_reflects_the_speech(
    page: Page,
) -> None:
    await wait_for_log(page, lambda log: set(event_ids(log, "input.speech_started")) & reflected(log))
    await wait_for_log(page, lambda log: event_ids(log, "input.sound"))


async def test_a_gesture_button_is_accepted_and_a_later_frame_reflects_it(page: Page) -> None:
    await page.wait_until("!document.querySelector('[data-gesture=wave]').disabled")
    await page.click("[data-gesture=wave]")
    log = await wait_for_log(page, lambda log: event_ids(log, "input.accepted", kind="gesture"))
    (gesture,) = event_ids(log, "input.accepted", kind="gesture")
    log = await wait_for_log(page, lambda log: gesture in reflected(log))
    accepted_at = next(i for i, line in enumerate(log) if f'"event_id":"{gesture}"' in line)
    reacted_at = next(i for i, line in enumerate(log) if gesture in reflected([line]))
    assert reacted_at > accepted_at
    await page.screenshot(SCREENSHOT)


async def test_the_page_threw_no_errors(page: Page) -> None:
    assert page.errors == []
