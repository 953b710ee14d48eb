"""The browser page over WebRTC end to end: a real server and real headless Chromium, both in a network
namespace that holds only loopback (made here: ``tests.support.netns``), a WAV file as the microphone.

The page is opened with ``?autostart=1&mic=1&transport=rtc``: it negotiates through ``GET /v1/rtc``,
plays the character's video and voice tracks in a ``<video>`` element, sends the microphone as a track and
the protocol's messages on a data channel. The server runs the ``world`` backend at 16 fps. The test reads
what a user would see and hear: the status line, the frames the page showed (drawn onto its canvas), the
event log, and Chromium's own statistics of the tracks it received and played.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest
import pytest_asyncio

from server.app import OnstageServer
from server.limits import Limits
from server.sessions import SessionFactory
from server.webrtc.settings import RtcSettings
from streaming_model.backends import open_backend
from tests.e2e.browser import (
    CHROMIUM,
    LOG,
    WEBRTC_FLAGS,
    Page,
    chromium,
    chunks_sent,
    event_ids,
    microphone_wav,
    reflected,
    wait_for_log,
)
from tests.support.netns import loopback_namespace

pytestmark = [
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="no /usr/bin/chromium: run scripts/setup-browser"),
]

FPS = 16
STATS = """(async () => {
  const out = {};
  (await window.onstage.rtc.pc.getStats()).forEach((r) => { if (r.type === "inbound-rtp") out[r.kind] = r; });
  return out;
})()"""
"""Chromium's statistics of the two tracks it receives, by kind."""
TALE = "Once upon a time a fox walked slowly through the deep green forest, looking for an old friend."
"""About six seconds of speech, short enough that the page's log line of it still shows its state."""


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def page(factory: SessionFactory, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Page]:
    with loopback_namespace():
        backend = open_backend("world", {"fps": str(FPS)})
        sessions = SessionFactory(backend, factory.voice, factory.hearing)
        rtc = RtcSettings(ice_addresses=("127.0.0.1",))
        server = OnstageServer(sessions, Limits(max_sessions=1), rtc=rtc)
        await server.start("127.0.0.1", 0)
        wav = microphone_wav(tmp_path_factory.mktemp("mic") / "speech-and-knocks.wav")
        url = f"http://127.0.0.1:{server.port}/?autostart=1&mic=1&seed=7&transport=rtc"
        try:
            async with chromium(url, wav, flags=WEBRTC_FLAGS) as page:
                yield page
        finally:
            closing = asyncio.ensure_future(server.close())
            done, _ = await asyncio.wait({closing}, timeout=15)
            assert done, "OnstageServer.close() did not return within 15 s"


async def stats(page: Page) -> dict[str, Any]:
    return await page.evaluate(STATS)


async def test_the_page_calls_over_webrtc_and_draws_every_frame_the_server_sends(page: Page) -> None:
    await page.wait_until("window.onstage && window.onstage.started !== null", timeout=30)
    assert await page.evaluate("window.onstage.transport") == "rtc"
    assert await page.evaluate("document.getElementById('status').dataset.state") == "live"
    started = await page.evaluate("window.onstage.started")
    assert started["fps"] == FPS
    first = await page.wait_until("window.onstage.framesDrawn >= 12 && window.onstage.framesDrawn")
    origin = await page.evaluate("window.location.origin")
    sent_before = await asyncio.to_thread(chunks_sent, origin)
    start = time.monotonic()
    await asyncio.sleep(2.0)
    drawn = await page.evaluate("window.onstage.framesDrawn")
    sent = (await asyncio.to_thread(chunks_sent, origin) - sent_before) * started["chunk_frames"]
    seconds = time.monotonic() - start
    # Every frame the server sends is shown (16 a second on a quiet machine), never more than real time.
    assert sent > 0 and drawn - first >= 0.8 * sent - started["chunk_frames"], (drawn - first, sent)
    assert (drawn - first) / seconds <= FPS * 1.25, f"{(drawn - first) / seconds:.1f} frames shown per second"
    video = "document.getElementById('remote')"
    assert await page.evaluate(f"[{video}.videoWidth, {video}.videoHeight]") == [
        started["width"],
        started["height"],
    ]
    pixels = await page.evaluate(
        "Array.from(document.getElementById('screen').getContext('2d')"
        f".getImageData(0, 0, {started['width']}, {started['height']}).data)"
    )
    rgb = np.asarray(pixels, dtype=np.float32).reshape(started["height"], started["width"], 4)[..., :3]
    assert rgb.std() > 10.0, "the picture is blank (one flat colour)"


async def test_video_and_voice_arrive_and_play(page: Page) -> None:
    await page.wait_until("window.onstage.started !== null", timeout=30)
    # The greeter plan says hello half a second in: by its end, the voice has been played.
    await wait_for_log(page, lambda log: any('"state":"ended"' in line for line in log), timeout=20)
    before = await stats(page)
    video = "document.getElementById('remote')"
    played_from = await page.evaluate(f"{video}.currentTime")
    await page.wait_until(f"{video}.currentTime > {played_from} + 0.5", timeout=10)
    after = await stats(page)
    assert after["video"]["framesDecoded"] > before["video"]["framesDecoded"] > 0
    assert after["audio"]["totalSamplesReceived"] > before["audio"]["totalSamplesReceived"] > 0
    assert before["audio"]["totalAudioEnergy"] > 0, "the greeting was received but nothing was heard"
    assert await page.evaluate(f"!{video}.paused && !{video}.muted")


async def test_speech_and_knocks_in_the_microphone_track_are_heard_and_a_frame_reflects_the_speech(
    page: Page,
) -> None:
    await wait_for_log(page, lambda log: set(event_ids(log, "input.speech_started")) & reflected(log), 30)
    await wait_for_log(page, lambda log: event_ids(log, "input.sound"))


async def test_a_gesture_button_is_accepted_and_a_frame_shown_later_reflects_it(page: Page) -> None:
    await page.wait_until("!document.querySelector('[data-gesture=wave]').disabled")
    await page.click("[data-gesture=wave]")
    log = await wait_for_log(page, lambda log: event_ids(log, "input.accepted", kind="gesture"))
    (gesture,) = event_ids(log, "input.accepted", kind="gesture")
    log = await wait_for_log(page, lambda log: gesture in reflected(log))
    accepted_at = next(i for i, line in enumerate(log) if f'"event_id":"{gesture}"' in line)
    reacted_at = next(i for i, line in enumerate(log) if gesture in reflected([line]))
    assert reacted_at > accepted_at


async def test_the_interrupt_button_stops_the_voice_the_page_plays(page: Page) -> None:
    # The microphone off first: its looping recording holds speech, and the user speaking over the
    # character cuts its voice (barge-in), whenever that speech comes round.
    assert await page.evaluate("window.onstage.mic !== null")
    await page.click("#mic")
    await page.wait_until("window.onstage.mic === null")
    # A plan of one speech of some seconds and no triggers (it replaces the greeter's).
    plan = {"name": "tale", "timeline": [{"at_s": 0.2, "behaviors": [{"kind": "speech", "text": TALE}]}]}
    await page.evaluate(f"window.onstage.rtc.send({{type: 'plan.run', plan: {json.dumps(plan)}}})")

    async def heard() -> float:
        return float((await stats(page))["audio"]["totalAudioEnergy"])

    async def energy_per_second(over_s: float) -> float:
        before, t = await heard(), time.monotonic()
        await asyncio.sleep(over_s)
        return (await heard() - before) / (time.monotonic() - t)

    await wait_for_log(page, lambda log: any(TALE in line and '"started"' in line for line in log), 30)
    quiet_before = await heard()
    async with asyncio.timeout(30):
        while await heard() == quiet_before:  # noqa: ASYNC110 (polls the browser's statistics)
            await asyncio.sleep(0.05)
    speaking = await energy_per_second(1.0)  # a second of the tale, as it plays
    await page.click("#interrupt")
    await wait_for_log(page, lambda log: any(TALE in line and '"interrupted"' in line for line in log), 10)
    # Once the chunk in flight and the jitter buffer have played out, the voice is silent, seconds before
    # the tale would have ended: almost no energy in a half second.
    deadline = time.monotonic() + 2.5
    quiet = await energy_per_second(0.5)
    while quiet >= 0.02 * speaking and time.monotonic() < deadline:
        quiet = await energy_per_second(0.5)
    assert quiet < 0.02 * speaking, (quiet, speaking, await page.evaluate(LOG))


async def test_the_page_threw_no_errors(page: Page) -> None:
    assert page.errors == []
