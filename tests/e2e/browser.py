"""Headless Chromium driven over the Chrome DevTools Protocol with plain websockets (no Playwright).

Debian's ``/usr/bin/chromium`` (``scripts/setup-browser`` installs it) is started with the flags that
../shared/ENVIRONMENT.md lists, a fresh profile and a WAV file as the fake microphone. The page's target
is reached through the DevTools HTTP endpoint; ``Page`` sends commands and keeps what the page threw.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import re
import shutil
import tempfile
import urllib.request
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import numpy as np
import websockets
from prometheus_client.parser import text_string_to_metric_families
from scipy.io import wavfile
from websockets.asyncio.client import ClientConnection

from server import demo_audio
from server.app import OnstageServer

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,900",
    "--use-fake-ui-for-media-stream",
    "--use-fake-device-for-media-stream",
    # The page's AudioContext is its media clock; without a click Chromium may keep it suspended.
    "--autoplay-policy=no-user-gesture-required",
)


WEBRTC_FLAGS = (
    # ICE on loopback only (the tests run in a network namespace that holds nothing else): Chromium
    # leaves 127.0.0.1 out of its candidates unless told, and would hide its addresses behind mDNS names.
    "--allow-loopback-in-peer-connection",
    "--disable-features=WebRtcHideLocalIpsWithMdns",
)


class CdpError(RuntimeError):
    """A DevTools command failed, or the page threw while evaluating an expression."""


class Page:
    """One page target: ``evaluate`` JavaScript, ``click`` an element like a mouse does, ``screenshot``."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.errors: list[str] = []  # uncaught exceptions and console.error lines, as the page reported them
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        with contextlib.suppress(websockets.ConnectionClosed):
            async for raw in self.ws:
                message = json.loads(raw)
                if "id" in message:
                    future = self._pending.pop(message["id"], None)
                    if future is not None and not future.done():
                        future.set_result(message)
                elif message.get("method") == "Runtime.exceptionThrown":
                    details = message["params"]["exceptionDetails"]
                    self.errors.append(details.get("exception", {}).get("description") or details["text"])
                elif message.get("method") == "Runtime.consoleAPICalled":
                    if message["params"]["type"] == "error":
                        self.errors.append(" ".join(str(a.get("value")) for a in message["params"]["args"]))

    async def call(self, method: str, timeout: float = 10.0, **params: Any) -> dict[str, Any]:
        """Send one DevTools command and return its ``result``."""
        command_id = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[command_id] = future
        await self.ws.send(json.dumps({"id": command_id, "method": method, "params": params}))
        answer = await asyncio.wait_for(future, timeout)
        if "error" in answer:
            raise CdpError(f"{method}: {answer['error']}")
        return answer["result"]

    async def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (promises are awaited; JSON values only)."""
        result = await self.call(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in result:
            raise CdpError(f"{expression!r} threw: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def wait_until(self, expression: str, timeout: float = 20.0, every: float = 0.1) -> Any:
        """Poll ``expression`` until it is truthy; returns that value (``TimeoutError`` after ``timeout``)."""
        async with asyncio.timeout(timeout):
            while not (value := await self.evaluate(expression)):  # noqa: ASYNC110 (polls another process)
                await asyncio.sleep(every)
        return value

    async def click(self, selector: str) -> None:
        """Press and release the left mouse button over the middle of the element ``selector`` names.

        The element is scrolled into view first: a mouse event outside the viewport hits nothing.
        """
        box = await self.evaluate(
            f"(() => {{ const el = document.querySelector({json.dumps(selector)});"
            " el.scrollIntoView({block: 'center'}); const r = el.getBoundingClientRect();"
            " return [r.x + r.width / 2, r.y + r.height / 2]; })()"
        )
        x, y = box
        for kind in ("mousePressed", "mouseReleased"):
            await self.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)

    async def screenshot(self, path: Path) -> Path:
        """Save what the page shows now as a PNG."""
        data = await self.call("Page.captureScreenshot", format="png")
        await asyncio.to_thread(path.write_bytes, base64.b64decode(data["data"]))
        return path

    async def close(self) -> None:
        await self.ws.close()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader


@contextlib.asynccontextmanager
async def chromium(
    url: str,
    microphone: Path,
    start_timeout: float = 20.0,
    before_page: str | None = None,
    flags: tuple[str, ...] = (),
) -> AsyncIterator[Page]:
    """Headless Chromium showing ``url`` with ``microphone`` (a 16-bit WAV) as the microphone.

    The page's DevTools domains are enabled before it navigates, so nothing it throws goes unseen.
    ``before_page``: JavaScript run in the page before any of its own scripts (to watch what they do).
    ``flags``: more command-line flags (``WEBRTC_FLAGS`` for a call over WebRTC on loopback).
    Chromium's own log goes to ``chrome_debug.log`` in its throwaway profile and is quoted if it dies.
    """
    profile = Path(tempfile.mkdtemp(prefix="onstage-chromium-"))
    process = await asyncio.create_subprocess_exec(
        str(CHROMIUM),
        *FLAGS,
        *flags,
        f"--user-data-dir={profile}",
        "--enable-logging",
        f"--use-file-for-fake-audio-capture={microphone}",
        "--remote-debugging-port=0",  # Chromium picks a free port and writes it into the profile
        "about:blank",
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    page: Page | None = None
    try:
        port = await _devtools_port(profile, process, start_timeout)
        targets = await asyncio.to_thread(_get_json, f"http://127.0.0.1:{port}/json/list")
        target = next(t for t in targets if t["type"] == "page")
        ws = await websockets.connect(target["webSocketDebuggerUrl"], max_size=2**26, compression=None)
        page = Page(ws)
        await page.call("Runtime.enable")
        await page.call("Page.enable")
        if before_page is not None:
            await page.call("Page.addScriptToEvaluateOnNewDocument", source=before_page)
        await page.call("Page.navigate", url=url)
        await page.wait_until("location.href !== 'about:blank' && document.readyState === 'complete'")
        yield page
    finally:
        if page is not None:
            await page.close()
        if process.returncode is None:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), 10)
            except TimeoutError:
                process.kill()
                await process.wait()
        shutil.rmtree(profile, ignore_errors=True)


@contextlib.asynccontextmanager
async def serving_page(
    server: OnstageServer, query: str, microphone: Path, **options: Any
) -> AsyncIterator[Page]:
    """Start ``server`` on loopback and show its page with ``query`` (``autostart=1&...``) in Chromium
    (``chromium``'s ``options``); close the server after, within 15 s: a session whose tasks swallow their
    cancellation would otherwise hang the whole run."""
    await server.start("127.0.0.1", 0)
    try:
        async with chromium(f"http://127.0.0.1:{server.port}/?{query}", microphone, **options) as page:
            yield page
    finally:
        closing = asyncio.ensure_future(server.close())
        done, _ = await asyncio.wait({closing}, timeout=15)
        assert done, "OnstageServer.close() did not return within 15 s (a session ignored its cancellation)"


async def _devtools_port(profile: Path, process: asyncio.subprocess.Process, timeout: float) -> int:
    """The DevTools port, once Chromium has written it to ``DevToolsActivePort`` in its profile."""
    marker = profile / "DevToolsActivePort"
    async with asyncio.timeout(timeout):
        while True:
            if process.returncode is not None:
                log = await asyncio.to_thread(_tail, profile / "chrome_debug.log")
                raise RuntimeError(f"chromium exited with {process.returncode}: {log}")
            lines = (await asyncio.to_thread(_tail, marker)).split()
            if lines:  # the file is written in one go, but may be seen empty for an instant
                return int(lines[0])
            await asyncio.sleep(0.05)


def _tail(path: Path, chars: int = 2000) -> str:
    return path.read_text(errors="replace")[-chars:] if path.exists() else ""


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.load(response)


def chunks_sent(origin: str) -> int:
    """Chunks the server's one session has sent so far (its ``/metrics``; blocking: call in a thread)."""
    with urllib.request.urlopen(f"{origin}/metrics", timeout=10) as response:
        text = response.read().decode()
    (count,) = (
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "onstage_session_chunks_sent_total"
    )
    return int(count)


def microphone_wav(path: Path) -> Path:
    """Speech, knocks, speech, claps (server.demo_audio), as the 16-bit 16 kHz WAV Chromium plays in a loop."""
    pcm = np.clip(demo_audio.demo_recording(), -1.0, 1.0 - 1 / 32768) * 32768.0
    wavfile.write(path, demo_audio.RATE, pcm.astype("<i2"))
    return path


LOG = "[...document.querySelectorAll('#log li')].map(li => li.textContent).reverse()"
"""The page's event log, oldest first (the page shows the newest on top)."""


def event_ids(log: list[str], message_type: str, **fields: str) -> list[str]:
    """Event ids of the logged messages of ``message_type`` (with the given string fields)."""
    out = []
    for line in log:
        if f" {message_type} " not in line or not all(f'"{k}":"{v}"' in line for k, v in fields.items()):
            continue
        if match := re.search(r'"event_id":"([^"]+)"', line):
            out.append(match.group(1))
    return out


def reflected(log: list[str]) -> set[str]:
    """Event ids named by drawn frames (the page logs "chunk N reflects e1, e2" when it draws them)."""
    return {e for line in log if (m := re.search(r"reflects (.+)$", line)) for e in m.group(1).split(", ")}


async def wait_for_log(page: Page, holds: Callable[[list[str]], object], timeout: float = 20.0) -> list[str]:
    """The page's log once ``holds(log)`` is truthy (polled every 100 ms); if it is not within ``timeout``
    seconds, an AssertionError that shows the log's last lines (what the page saw instead)."""
    try:
        async with asyncio.timeout(timeout):
            while not holds(log := await page.evaluate(LOG)):  # noqa: ASYNC110 (polls the browser)
                await asyncio.sleep(0.1)
    except TimeoutError:
        tail = "\n".join((await page.evaluate(LOG))[-15:])
        raise AssertionError(f"not in the page's log within {timeout:g} s; its last lines:\n{tail}") from None
    return log
