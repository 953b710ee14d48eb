"""The page's camera watched from inside Chromium: which footage frame the hand and face models looked at
when, what the page sent, and its log lines with their times. For the camera's browser test and
benchmarks/camera.py.

``watch_script()`` is injected before the page's own scripts. It reads the frame index that
tests/camera_footage.py writes into each frame from the page's own camera picture (``#self``) as the page
fires ``onstage:camera-frame``, records every message the page sends over its WebSocket, and every line of
its log with the ``performance.now()`` it was written at, and the ``input.gesture`` messages it got.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from tests import camera_footage
from tests.e2e.browser import Page


def watch_script() -> str:
    """The JavaScript that fills ``window.__camera``."""
    row, columns = camera_footage.mark_samples()
    constants = json.dumps([camera_footage.WIDTH, camera_footage.HEIGHT, row, columns])
    return (
        r"""
(() => {
  const watch = (window.__camera = { marks: [], sent: [], lines: [], gestures: [] });
  const [W, H, ROW, COLUMNS] = CONSTANTS;
  const canvas = document.createElement("canvas");
  canvas.width = W;
  canvas.height = H;
  const g = canvas.getContext("2d", { willReadFrequently: true });
  addEventListener("onstage:camera-frame", (e) => {
    g.drawImage(document.getElementById("self"), 0, 0, W, H);
    const px = g.getImageData(0, ROW, W, 1).data;
    let index = 0;
    for (const x of COLUMNS) index = (index << 1) | ((px[4 * x] + px[4 * x + 1] + px[4 * x + 2]) / 3 > 127 ? 1 : 0);
    watch.marks.push([e.detail.t_ms, index]);
  });
  const parse = JSON.parse;
  JSON.parse = function (...args) {
    const value = parse.apply(this, args);
    if (value && value.type === "input.gesture") watch.gestures.push(value);
    return value;
  };
  const send = WebSocket.prototype.send;
  WebSocket.prototype.send = function (data) {
    watch.sent.push(typeof data === "string" ? data : { binary: data.byteLength ?? data.size });
    return send.call(this, data);
  };
  document.addEventListener("DOMContentLoaded", () => {
    new MutationObserver((records) => {
      const t = performance.now();
      for (const r of records) for (const node of r.addedNodes) watch.lines.push([t, node.textContent]);
    }).observe(document.getElementById("log"), { childList: true });
  });
})();
"""
    ).replace("CONSTANTS", constants)


@dataclass(frozen=True)
class Seen:
    """A gesture the server recognised: its event, the page time of the frame that completed it, and the
    page time of the first drawn frame that reflects it (None: none yet)."""

    gesture: str
    event_id: str
    t_ms: float
    x: float | None
    y: float | None
    reflected_ms: float | None


@dataclass
class Watched:
    """What ``window.__camera`` held at one moment."""

    marks: list[tuple[float, int]]
    sent: list[Any]
    lines: list[tuple[float, str]]
    gestures: list[dict[str, Any]]

    def seen(self) -> list[Seen]:
        """Every ``input.gesture`` the page was told of, in order."""
        shown: dict[str, float] = {}
        for t, text in self.lines:
            if m := re.search(r"reflects (.+)$", text):
                for event_id in m.group(1).split(", "):
                    shown.setdefault(event_id, t)
        return [
            Seen(m["gesture"], m["event_id"], m["t_ms"], m.get("x"), m.get("y"), shown.get(m["event_id"]))
            for m in self.gestures
        ]

    def frame_at(self, t_ms: float) -> int | None:
        """The footage frame the models looked at ``t_ms`` (a time the page sent landmarks for)."""
        return next((index for t, index in self.marks if t == t_ms), None)

    def first_shown(self, frame: int, after_ms: float = -np.inf) -> float | None:
        """When the models first looked at footage frame ``frame`` or a later one of the same pass, after
        ``after_ms``."""
        previous = -1
        for t, index in self.marks:
            if t > after_ms and index >= frame and (previous < frame or previous > index):
                return t
            previous = index
        return None

    def landmarks(self) -> list[dict[str, Any]]:
        """The ``input.landmarks`` messages the page sent, decoded."""
        return [
            m
            for m in (json.loads(s) for s in self.sent if isinstance(s, str))
            if m["type"] == "input.landmarks"
        ]


async def watched(page: Page) -> Watched:
    """What the watch script has recorded so far."""
    data = await page.evaluate("window.__camera")
    return Watched(
        [(float(t), int(i)) for t, i in data["marks"]],
        data["sent"],
        [(float(t), str(text)) for t, text in data["lines"]],
        data["gestures"],
    )
