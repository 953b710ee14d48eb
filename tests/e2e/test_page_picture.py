"""The browser page sizes its picture from ``session.started``: a 160x96 session at 16 fps in Chromium.

No backend in the repository serves that picture yet (the ``world`` backend will), so the page, served
from its own files, talks to a loopback WebSocket peer that speaks the documented protocol for such a
session: ``session.started`` naming 160x96 at 16 fps with 12-frame chunks, then one chunk of 160x96 JPEG
frames. The page must size its canvas when the session starts, before any frame, and draw every pixel.
"""

from __future__ import annotations

import asyncio
import contextlib
import http
import json
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest
import pytest_asyncio
from scipy.io import wavfile
from websockets.asyncio.server import ServerConnection, serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from server import protocol as p
from server.app import CONTENT_TYPES, PAGE_DIR, PAGE_FILES
from server.media import MediaClock, encode_jpeg
from tests.e2e.browser import CHROMIUM, Page, chromium

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="no /usr/bin/chromium: run scripts/setup-browser"),
]

WIDTH, HEIGHT = 160, 96
CLOCK = MediaClock(fps=16, chunk_frames=12)


def picture() -> np.ndarray:
    """A 160x96 frame: grey, with a red block in its bottom-right corner (outside a 128x128 square)."""
    frame = np.full((HEIGHT, WIDTH, 3), 128, dtype=np.uint8)
    frame[64:, 136:] = (220, 30, 30)
    return frame


class Peer:
    """Serves the page's files and, at ``/v1/session``, one session of a 160x96, 16 fps model."""

    def __init__(self) -> None:
        self.send_frames = asyncio.Event()

    def files(self, conn: ServerConnection, request: Request) -> Response | None:
        path = request.path.split("?")[0]
        if path == "/v1/session":
            return None
        name = "index.html" if path == "/" else path.removeprefix("/static/")
        if name not in PAGE_FILES:
            return Response(404, "Not Found", Headers([("Content-Length", "0")]), b"")
        body = (PAGE_DIR / name).read_bytes()
        kind = CONTENT_TYPES.get(Path(name).suffix, "text/plain")
        headers = Headers([("Content-Type", kind), ("Content-Length", str(len(body)))])
        return Response(http.HTTPStatus.OK.value, "OK", headers, body)

    async def session(self, ws: ServerConnection) -> None:
        start = json.loads(await ws.recv())
        assert start["type"] == "session.start"
        started = p.SessionStarted(
            session_id="s1",
            resume_token="t",
            protocol=p.PROTOCOL_VERSION,
            width=WIDTH,
            height=HEIGHT,
            fps=CLOCK.fps,
            chunk_frames=CLOCK.chunk_frames,
            audio_in_rate=p.AUDIO_IN_RATE,
            audio_out_rate=24_000,
            capabilities=p.Capabilities(actions=["idle"], emotions=["neutral"], gestures=[], sounds=[]),
        )
        await ws.send(p.encode_server(started))
        # Frames once the test has looked at the canvas; nothing if the page went away first.
        go, gone = asyncio.ensure_future(self.send_frames.wait()), asyncio.ensure_future(ws.wait_closed())
        await asyncio.wait({go, gone}, return_when=asyncio.FIRST_COMPLETED)
        go.cancel()
        gone.cancel()
        jpeg = encode_jpeg(picture())
        with contextlib.suppress(ConnectionClosed):
            for i in range(CLOCK.chunk_frames):
                header = p.VideoHeader(
                    seq=i + 1, chunk=0, frame=i, pts_ms=CLOCK.pts_ms(i), width=WIDTH, height=HEIGHT
                )
                await ws.send(p.encode_media(p.Kind.VIDEO, header, jpeg))
        await ws.wait_closed()


@pytest_asyncio.fixture
async def page(tmp_path: Path) -> AsyncIterator[tuple[Page, Peer]]:
    peer = Peer()
    mic = tmp_path / "silence.wav"
    wavfile.write(mic, 16_000, np.zeros(1600, dtype="<i2"))
    async with serve(peer.session, "127.0.0.1", 0, process_request=peer.files) as server:
        port = server.sockets[0].getsockname()[1]
        try:
            async with chromium(f"http://127.0.0.1:{port}/?autostart=1", mic) as browser:
                yield browser, peer
        finally:
            peer.send_frames.set()  # a failed test must not leave the session waiting for ever


async def test_the_canvas_takes_the_sessions_picture_size_and_shows_all_of_it(
    page: tuple[Page, Peer],
) -> None:
    browser, peer = page
    await browser.wait_until("window.onstage && window.onstage.started !== null")
    size = await browser.evaluate(
        "[document.getElementById('screen').width, document.getElementById('screen').height, window.onstage.framesDrawn]"
    )
    assert size == [WIDTH, HEIGHT, 0]  # from session.started, before any frame arrived
    peer.send_frames.set()
    await browser.wait_until(f"window.onstage.framesDrawn >= {CLOCK.chunk_frames}")
    pixels = await browser.evaluate(
        f"Array.from(document.getElementById('screen').getContext('2d').getImageData(0, 0, {WIDTH}, {HEIGHT}).data)"
    )
    rgb = np.asarray(pixels, dtype=np.float32).reshape(HEIGHT, WIDTH, 4)[..., :3]
    corner, rest = rgb[70:, 140:].mean(axis=(0, 1)), rgb[:60, :120].mean(axis=(0, 1))
    assert corner[0] > 180 and corner[1] < 80, f"the bottom-right corner is not drawn: {corner}"
    assert abs(rest - 128).max() < 20, f"the rest of the picture is off: {rest}"
    assert browser.errors == []
