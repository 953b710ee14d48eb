"""Reaction latency and the audio-to-mouth offset as headless Chromium plays them, over the page's WebRTC
path and its WebSocket path, in one run against one ``onstage serve`` (its own process).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/browser.py                  # the default model, 6 per kind
    PYTHONPATH=$PWD .venv/bin/python benchmarks/browser.py --backend world  # a server that keeps up
    PYTHONPATH=$PWD .venv/bin/python benchmarks/browser.py --rounds 12

The server and Chromium run in a network namespace that holds only loopback (``tests.support.netns``; ICE on
127.0.0.1), and the browser is the page users open (``/?autostart=1&transport=rtc|ws``), watched by a
script injected before its own (``WATCH``); no microphone. Times are the page's ``performance.now()``.

Reaction: from the page sending an input (a gesture, typed text) to the moment the page shows the first
frame that reflects it: over WebRTC the ``requestVideoFrameCallback`` of the video frame whose RTP
timestamp maps to the reflecting chunk (the page's own rule, ``app.js``), over the WebSocket the draw of
the frame whose header reflects it, both as the page logs "chunk N reflects ...". Inputs go in every
``--gap`` chunks, at a moment spread over one chunk (seeded).

Audio-to-mouth offset (+ = mouth late): one speech of about ten seconds per transport. The mouth is what
``streaming_model.probes`` reads from each picture the page drew, at the time it drew it; the voice is
what the page plays when: over the WebSocket each audio slice it schedules on its AudioContext, over
WebRTC the voice track as an AudioWorklet on the page's AudioContext receives it (after Chromium's jitter
buffer and its audio/video sync), both placed on the performance clock by
``AudioContext.getOutputTimestamp`` (so the output latency is in). The offset is the shift of the voice,
in 5 ms steps within 500 ms either way (a best shift at that edge is not taken), that best correlates its loudness over each frame's display time
with the mouth. The WebSocket page drops a voice slice that arrives after its play time (a server behind
its clock): how many it played of those it got is shown beside its offset.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import re
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from served import served
from transports import TALK

from server.client_cli import percentiles
from server.core.lipsync import MIN_CORRELATION
from streaming_model.probes import measure
from tests.e2e.browser import CHROMIUM, WEBRTC_FLAGS, Page, chromium, microphone_wav
from tests.support.netns import loopback_namespace

SERVER_CONFIG = """
[server]
backend = "{backend}"

[server.limits]
max_sessions = 1
resume_grace_s = 0.2

[server.rtc]
ice_addresses = ["127.0.0.1"]
"""
KINDS = ("gesture", "text")
STEP_MS = 5.0
MAX_SHIFT_MS = 500.0
WATCH = r"""
(() => {
  const bench = (window.__bench = { lines: [], frames: [], audio: [], speech: [], recording: false });
  const now = () => performance.now();
  // The character's speech states, from the messages the page parses (its log cuts long ones short).
  const parse = JSON.parse;
  JSON.parse = function (...args) {
    const value = parse.apply(this, args);
    if (value && value.type === "character.speech") bench.speech.push([now(), value.state]);
    return value;
  };
  // The page's log: every line as it is written ("chunk N reflects e1, e2" when it shows that chunk).
  document.addEventListener("DOMContentLoaded", () => {
    new MutationObserver((records) => {
      const t = now();
      for (const r of records) for (const node of r.addedNodes) bench.lines.push([t, node.textContent]);
    }).observe(document.getElementById("log"), { childList: true });
  });
  const contextToPerf = (ctx, at) => {
    const stamp = ctx.getOutputTimestamp();
    return stamp.performanceTime + (at - stamp.contextTime) * 1000;
  };
  // Each picture the page draws on its screen, when it draws it.
  const draw = CanvasRenderingContext2D.prototype.drawImage;
  CanvasRenderingContext2D.prototype.drawImage = function (...args) {
    draw.apply(this, args);
    if (bench.recording && this.canvas.id === "screen") {
      const { width, height } = this.canvas;
      bench.frames.push([now(), this.getImageData(0, 0, width, height).data]);
    }
  };
  // Over the WebSocket: each audio slice the page schedules, when it will be heard (5 ms blocks).
  const blocks = (samples, rate, t0, out) => {
    const n = Math.max(1, Math.round((rate * 5) / 1000));
    for (let a = 0; a < samples.length; a += n) {
      let sum = 0;
      const b = Math.min(samples.length, a + n);
      for (let i = a; i < b; i++) sum += samples[i] * samples[i];
      out.push([t0 + (a / rate) * 1000, sum, b - a]);
    }
  };
  bench.slices = 0; // audio slices the page was given over the WebSocket (it drops those already late)
  const createBuffer = BaseAudioContext.prototype.createBuffer;
  BaseAudioContext.prototype.createBuffer = function (...args) {
    if (bench.recording) bench.slices += 1;
    return createBuffer.apply(this, args);
  };
  bench.played = 0;
  const start = AudioBufferSourceNode.prototype.start;
  AudioBufferSourceNode.prototype.start = function (when = 0, ...rest) {
    if (bench.recording && this.buffer) {
      bench.played += 1;
      blocks(this.buffer.getChannelData(0), this.buffer.sampleRate, contextToPerf(this.context, when), bench.audio);
    }
    return start.call(this, when, ...rest);
  };
  // Over WebRTC: the voice track as the page's AudioContext receives it.
  const TAP = `registerProcessor("bench-tap", class extends AudioWorkletProcessor {
    process(inputs) {
      const x = inputs[0] && inputs[0][0];
      if (x) { let s = 0; for (let i = 0; i < x.length; i++) s += x[i] * x[i]; this.port.postMessage([currentTime, s, x.length]); }
      return true;
    }
  });`;
  bench.tapRtc = async () => {
    const ctx = window.onstage.audio;
    await ctx.audioWorklet.addModule(URL.createObjectURL(new Blob([TAP], { type: "application/javascript" })));
    const node = new AudioWorkletNode(ctx, "bench-tap", { numberOfOutputs: 1 });
    const silent = ctx.createGain();
    silent.gain.value = 0;
    ctx.createMediaStreamSource(document.getElementById("remote").srcObject).connect(node);
    node.connect(silent).connect(ctx.destination);
    node.port.onmessage = (e) => {
      if (bench.recording) bench.audio.push([contextToPerf(ctx, e.data[0]), e.data[1], e.data[2]]);
    };
  };
  bench.fire = (message) => {
    const t = now();
    const s = window.onstage;
    if (s.rtc) s.rtc.send(message);
    else s.ws.send(JSON.stringify(message));
    return t;
  };
  // Pictures as base64 RGBA, a batch at a time (JSON arrays of pixels would be ten times the size).
  bench.takeFrames = (n) =>
    bench.frames.splice(0, n).map(([t, px]) => {
      let binary = "";
      for (let i = 0; i < px.length; i += 8192) binary += String.fromCharCode.apply(null, px.subarray(i, i + 8192));
      return [t, btoa(binary)];
    });
})();
"""
"""Injected before the page's own scripts: what the page shows and plays, when (``window.__bench``)."""


@dataclass
class Trial:
    kind: str
    sent: float
    ref: str
    event_id: str | None = None
    shown: float | None = None

    @property
    def ms(self) -> float | None:
        return None if self.shown is None else self.shown - self.sent


@contextlib.asynccontextmanager
async def page(base: str, transport: str, seed: int) -> AsyncIterator[tuple[Page, dict[str, Any]]]:
    """The page in a call over ``transport`` (``session.started`` with it), watched."""
    url = f"{base}/?autostart=1&seed={seed}&transport={transport}"
    with tempfile.TemporaryDirectory() as tmp:  # Chromium wants a microphone file; the page leaves it off
        mic = microphone_wav(Path(tmp) / "mic.wav")
        async with chromium(url, mic, before_page=WATCH, flags=WEBRTC_FLAGS) as p:
            started = await p.wait_until("window.onstage && window.onstage.started", timeout=60)
            if await p.evaluate("window.onstage.transport") != transport:
                raise RuntimeError(f"the page did not call over {NAMES[transport]}")
            if transport == "rtc":
                await p.wait_until("document.getElementById('remote').srcObject !== null", timeout=30)
                await p.evaluate("window.__bench.tapRtc()")
            yield p, started
    await asyncio.sleep(0.5)  # past the server's resume grace: this session is gone before the next


async def lines(p: Page) -> list[tuple[float, str]]:
    return [tuple(x) for x in await p.evaluate("window.__bench.lines")]


async def wait_line(p: Page, pattern: str, timeout: float = 30.0) -> tuple[float, str]:
    regex = re.compile(pattern)
    async with asyncio.timeout(timeout):
        while True:
            for t, text in await lines(p):
                if regex.search(text):
                    return t, text
            await asyncio.sleep(0.1)


async def reactions(
    p: Page, started: dict[str, Any], rounds: int, gap: int, rng: np.random.Generator
) -> list[Trial]:
    chunk_s = started["chunk_frames"] / started["fps"]
    await asyncio.sleep(4.0)  # past the greeter's hello
    trials: list[Trial] = []
    for i in range(rounds):
        for kind in KINDS:
            await asyncio.sleep((gap + rng.uniform()) * chunk_s)
            ref = f"{kind}{i}"
            message = (
                {"type": "input.gesture", "gesture": "wave"}
                if kind == "gesture"
                else {"type": "input.text", "text": "hello"}
            )
            trial = Trial(
                kind, await p.evaluate(f"window.__bench.fire({json.dumps({**message, 'ref': ref})})"), ref
            )
            _, accepted = await wait_line(p, rf'"ref":"{ref}"')
            trial.event_id = re.search(r'"event_id":"([^"]+)"', accepted)[1]  # type: ignore[index]
            trials.append(trial)
    await asyncio.sleep((gap + 1) * chunk_s)
    shown = [(t, m[1].split(", ")) for t, text in await lines(p) if (m := re.search(r"reflects (.+)$", text))]
    for trial in trials:
        trial.shown = next((t for t, ids in shown if trial.event_id in ids and t >= trial.sent), None)
    return trials


@dataclass
class Talk:
    """What the page drew and played over one speech."""

    times: np.ndarray  # when each picture was drawn (ms)
    rgb: np.ndarray  # (N, H, W, 3) the pictures
    audio: np.ndarray  # (M, 3) voice blocks: when heard (ms), sum of squares, samples
    slices: tuple[int, int] | None  # over the WebSocket: voice slices played, of those the page got


async def talking(p: Page, started: dict[str, Any]) -> Talk:
    """The page's pictures and voice over one speech of about ten seconds."""
    plan = {"name": "talk", "timeline": [{"at_s": 0.3, "behaviors": [{"kind": "speech", "text": TALK}]}]}
    await p.evaluate("window.__bench.recording = true")
    said = await p.evaluate("window.__bench.speech.length")  # the greeting's and any answer's so far
    await p.evaluate(f"window.__bench.fire({json.dumps({'type': 'plan.run', 'plan': plan})})")
    await p.wait_until(
        f"window.__bench.speech.slice({said}).some(([, state]) => state !== 'started')", timeout=90
    )
    await asyncio.sleep(1.0)  # the voice's tail, as the page plays it
    await p.evaluate("window.__bench.recording = false")
    times, pictures = [], []
    while batch := await p.evaluate("window.__bench.takeFrames(24)"):
        for t, data in batch:
            times.append(t)
            pictures.append(np.frombuffer(base64.b64decode(data), np.uint8))
    audio = np.asarray(await p.evaluate("window.__bench.audio"), dtype=np.float64).reshape(-1, 3)
    rgb = np.stack(pictures).reshape(-1, started["height"], started["width"], 4)[..., :3]
    slices: tuple[int, int] | None = None
    if await p.evaluate("window.onstage.transport") == "ws":
        played, given = await p.evaluate("[window.__bench.played, window.__bench.slices]")
        slices = (int(played), int(given))
    return Talk(np.asarray(times), rgb, audio, slices)


def offset(talk: Talk, fps: int) -> str:
    """The shift of the voice that best lines its loudness up with the mouth (+ = mouth late)."""
    times, rgb, audio = talk.times, talk.rgb, talk.audio
    played = "" if talk.slices is None else f"; {talk.slices[0]} of {talk.slices[1]} voice slices played"
    mouth = np.nan_to_num(measure(rgb, 0).mouth)
    order = np.argsort(audio[:, 0])
    at, sumsq, n = audio[order].T
    cum_s, cum_n = np.concatenate([[0], np.cumsum(sumsq)]), np.concatenate([[0], np.cumsum(n)])
    frame_ms = 1000.0 / fps

    def voice(shift_ms: float) -> np.ndarray:
        a = np.searchsorted(at, times + shift_ms)
        b = np.searchsorted(at, times + shift_ms + frame_ms)
        count = cum_n[b] - cum_n[a]
        return np.sqrt(np.where(count > 0, (cum_s[b] - cum_s[a]) / np.maximum(count, 1), 0.0))

    def r_at(shift_ms: float) -> float:
        v = voice(shift_ms)
        return float(np.corrcoef(v, mouth)[0, 1]) if v.std() > 0 and mouth.std() > 0 else float("nan")

    shifts = np.arange(-MAX_SHIFT_MS, MAX_SHIFT_MS + STEP_MS, STEP_MS)
    rs = np.array([r_at(s) for s in shifts])
    if np.all(np.isnan(rs)):
        return f"not measured: the voice or the mouth is flat ({len(times)} frames drawn{played})"
    best = int(np.nanargmax(rs))
    if best in (0, shifts.size - 1):
        return f"not measured: the best shift is at the edge of the search (r = {rs[best]:.2f}{played})"
    if rs[best] < MIN_CORRELATION:
        return f"not measured: the mouth does not follow the voice (best r = {rs[best]:.2f}{played})"
    return f"{-shifts[best]:+.0f} ms (r = {rs[best]:.2f}; {len(times)} frames drawn{played})"


def table(results: dict[str, list[Trial]]) -> list[str]:
    out = [
        "| input | transport | n | shown | p50 (ms) | p95 (ms) | max (ms) |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for kind in (*KINDS, "all"):
        for transport, trials in results.items():
            group = [t for t in trials if kind in (t.kind, "all")]
            ms = [t.ms for t in group if t.ms is not None]
            stats = percentiles(ms)
            cells = f"{stats[0]:.0f} | {stats[1]:.0f} | {max(ms):.0f}" if stats else "- | - | -"
            out.append(f"| {kind} | {NAMES[transport]} | {len(group)} | {len(ms)} | {cells} |")
    return out


NAMES = {"ws": "WebSocket", "rtc": "WebRTC"}


async def main(args: argparse.Namespace) -> None:
    rng = np.random.default_rng(args.seed)
    results: dict[str, list[Trial]] = {}
    offsets: dict[str, str] = {}
    async with served(SERVER_CONFIG.format(backend=args.backend)) as base:
        for transport in ("ws", "rtc"):
            async with page(base, transport, args.seed) as (p, started):
                results[transport] = await reactions(p, started, args.rounds, args.gap, rng)
                offsets[transport] = offset(await talking(p, started), started["fps"])
                errors = list(p.errors)
            if errors:
                print(f"(the page threw over {NAMES[transport]}: {errors[:3]})")
    print(
        f"## Reaction as headless Chromium shows it ({args.backend} backend, seed {args.seed}, "
        f"{args.rounds} per kind and transport)\n"
    )
    print("\n".join(table(results)) + "\n")
    print("## Audio-to-mouth offset as headless Chromium plays it (+ = mouth late)\n")
    print("| transport | offset |\n|---|---|")
    for transport, text in offsets.items():
        print(f"| {NAMES[transport]} | {text} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--rounds", type=int, default=6, help="inputs per kind and transport")
    parser.add_argument("--gap", type=int, default=15, help="chunks between inputs")
    parser.add_argument("--backend", default="tiny", help="the server's video model: tiny (default) or world")
    if not CHROMIUM.exists():
        raise SystemExit("no /usr/bin/chromium: run scripts/setup-browser")
    with loopback_namespace():
        asyncio.run(main(parser.parse_args()))
