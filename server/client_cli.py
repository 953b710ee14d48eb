"""``onstage client``: talk to a running server from a terminal and measure how fast the character reacts.

It streams a WAV file as the microphone (any rate, resampled to 16 kHz mono, sent in 20 ms frames at
real-time pace), sends gestures and text at given times, saves what comes back (the video with the
character's voice; a WAV of the voice beside it) and prints a latency report::

    onstage client talk.wav --gesture 2.5:wave --text 4.0:"hello" --out call.mp4

Reaction times are measured here, at the client: from sending an input (for what the server heard in the
audio, from sending the audio frame that holds the moment it names) to receiving the first video frame
whose ``reflects`` names that input's event. An input that will not show (the server says why in
``input.outcome``) is reported with that reason instead of a time.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from dataclasses import dataclass
from math import gcd
from pathlib import Path

import numpy as np
from scipy.io import wavfile
from scipy.signal import resample_poly

from server.client import Received, SessionClient
from server.recording import VIDEO_SUFFIXES, mp4_available, save_video, save_wav

RATE = 16_000
FRAME_SAMPLES = 320  # 20 ms at 16 kHz, what the browser page sends too
FRAME_S = FRAME_SAMPLES / RATE
DEFAULT_URL = "ws://127.0.0.1:8765/v1/session"


@dataclass(frozen=True)
class TimedInput:
    """A message to send ``at_s`` seconds after the audio starts: a gesture name or a text."""

    at_s: float
    kind: str  # "gesture" or "text"
    value: str

    def message(self, ref: str) -> dict[str, str]:
        if self.kind == "gesture":
            return {"type": "input.gesture", "gesture": self.value, "ref": ref}
        return {"type": "input.text", "text": self.value, "ref": ref}


@dataclass(frozen=True)
class Reaction:
    """One input and the first frame that reflected it (``frame_t`` None: no frame did; ``unshown`` is
    then the server's reason, when it gave one)."""

    kind: str
    label: str
    sent: float
    event_id: str | None
    frame_t: float | None
    unshown: str | None = None

    @property
    def ms(self) -> float | None:
        return None if self.frame_t is None else (self.frame_t - self.sent) * 1000.0


def timed(kind: str):
    """An argparse type for ``SECONDS:VALUE`` (e.g. ``2.5:wave``) making a ``TimedInput`` of ``kind``."""

    def parse(spec: str) -> TimedInput:
        at, sep, value = spec.partition(":")
        try:
            seconds = float(at)
        except ValueError:
            seconds = -1.0
        if not sep or not value or seconds < 0:
            raise argparse.ArgumentTypeError(f"{spec!r}: expected SECONDS:{kind.upper()}, e.g. 2.5:wave")
        return TimedInput(seconds, kind, value)

    return parse


def read_wav_16k(path: Path) -> np.ndarray:
    """A WAV file (8/16/32-bit integer or float, any rate, any channels) as 16 kHz mono int16."""
    rate, data = wavfile.read(path)
    if data.dtype == np.uint8:
        audio = (data.astype(np.float32) - 128.0) / 128.0
    elif np.issubdtype(data.dtype, np.integer):
        audio = data.astype(np.float32) / float(np.iinfo(data.dtype).max + 1)
    else:
        audio = data.astype(np.float32)
    if audio.ndim == 2:
        audio = audio.mean(axis=1)
    if rate != RATE:
        common = gcd(rate, RATE)
        audio = resample_poly(audio, RATE // common, rate // common).astype(np.float32)
    return (np.clip(audio, -1.0, 1.0 - 1 / 32768) * 32768.0).astype("<i2")


def percentiles(values: list[float]) -> tuple[float, float, float] | None:
    """p50, p95 and p99 of ``values`` (None when there are none)."""
    if not values:
        return None
    p50, p95, p99 = np.percentile(np.asarray(values), [50, 95, 99])
    return float(p50), float(p95), float(p99)


async def converse(
    client: SessionClient, pcm: np.ndarray, inputs: list[TimedInput], tail_s: float
) -> tuple[list[tuple[TimedInput, str, float]], np.ndarray]:
    """Stream ``pcm`` in real time with ``inputs`` at their times, then ``tail_s`` of silence.

    Returns each input with its ref and send time, and the send time of every 20 ms audio frame.
    """
    end_s = max([pcm.size / RATE, *(i.at_s for i in inputs)]) + tail_s
    frames = max(1, round(end_s / FRAME_S))
    audio = np.zeros(frames * FRAME_SAMPLES, dtype="<i2")
    audio[: pcm.size] = pcm[: audio.size]
    pending = sorted(inputs, key=lambda i: i.at_s)
    sent: list[tuple[TimedInput, str, float]] = []
    frame_sent = np.zeros(frames)
    start = time.monotonic()
    for n in range(frames):
        # Paced by the clock, not by the previous send, so a slow send does not stretch the audio.
        if (delay := start + n * FRAME_S - time.monotonic()) > 0:
            await asyncio.sleep(delay)
        while pending and pending[0].at_s <= n * FRAME_S:
            item = pending.pop(0)
            ref = f"in{len(sent)}"
            sent.append((item, ref, await client.send(item.message(ref))))
        frame_sent[n] = await client.send_audio(audio[n * FRAME_SAMPLES : (n + 1) * FRAME_SAMPLES].tobytes())
    return sent, frame_sent


def reactions(
    received: Received, sent: list[tuple[TimedInput, str, float]], frame_sent: np.ndarray
) -> list[Reaction]:
    """The reaction to every input sent and to every speech start or sound the server heard."""
    accepted = {m.get("ref"): m["event_id"] for m in received.of_type("input.accepted")}
    unshown = {m["event_id"]: m["reason"] for m in received.of_type("input.outcome") if not m["shown"]}
    out = []
    for item, ref, t in sent:
        event_id = accepted.get(ref)
        frame = received.first_reflecting(event_id) if event_id else None
        why = unshown.get(event_id) if event_id else None
        out.append(Reaction(item.kind, item.value, t, event_id, frame.t if frame else None, why))
    for _, message in received.messages:
        kind = {"input.speech_started": "speech", "input.sound": "sound"}.get(message.get("type", ""))
        if kind is None:
            continue
        index = min(int(message["audio_ms"] / 1000 / FRAME_S), frame_sent.size - 1)
        frame = received.first_reflecting(message["event_id"])
        label = message.get("label", "started")
        why = unshown.get(message["event_id"])
        out.append(
            Reaction(kind, label, frame_sent[index], message["event_id"], frame.t if frame else None, why)
        )
    return sorted(out, key=lambda r: r.sent)


def stream_report(received: Received, fps: int) -> list[str]:
    """Frames received, missing frames (by pts) and arrival gaps longer than three frame times."""
    video = received.video
    if not video:
        return ["no video frames received"]
    slots = [round(f.header["pts_ms"] * fps / 1000) for f in video]
    expected = slots[-1] - slots[0] + 1
    arrivals = np.diff([f.t for f in video]) * 1000.0
    long_gaps = arrivals[arrivals > 3000.0 / fps]
    return [
        f"frames received: {len(video)} of {expected} in the pts span ({expected - len(set(slots))} missing)",
        f"arrival gaps over {3000 / fps:.0f} ms: {long_gaps.size}"
        + (f" (longest {arrivals.max():.0f} ms)" if arrivals.size else ""),
        f"audio slices received: {len(received.audio)}",
    ]


def latency_report(found: list[Reaction], start: float) -> list[str]:
    """A markdown table of every reaction (times from ``start``), then p50/p95/p99 per kind and overall."""
    lines = ["| sent at (s) | input | event | reaction (ms) |", "|---:|---|---|---:|"]
    for r in found:
        shown = f"{r.ms:.0f}" if r.ms is not None else f"not shown: {r.unshown}" if r.unshown else "-"
        lines.append(f"| {r.sent - start:.2f} | {r.kind}: {r.label} | {r.event_id or '-'} | {shown} |")
    lines += [
        "",
        "| kind | n | reflected | p50 (ms) | p95 (ms) | p99 (ms) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for kind in [*sorted({r.kind for r in found}), "all"]:
        group = [r for r in found if kind in ("all", r.kind)]
        ms = [r.ms for r in group if r.ms is not None]
        stats = percentiles(ms)
        cells = " | ".join(f"{v:.0f}" for v in stats) if stats else "- | - | -"
        lines.append(f"| {kind} | {len(group)} | {len(ms)} | {cells} |")
    return lines


async def talk(args: argparse.Namespace) -> int:
    """Hold the call ``args`` describe, save it and print the report (``run`` without the event loop)."""
    pcm = read_wav_16k(args.wav) if args.wav else np.zeros(0, dtype="<i2")
    inputs = [*args.gesture, *args.text]
    token = args.token or os.environ.get("ONSTAGE_TOKEN")
    async with SessionClient(args.url, token=token) as client:
        fields = {k: v for k, v in (("seed", args.seed), ("character", args.character)) if v is not None}
        started = await client.start(**fields)
        print(
            f"# session {started['session_id']}: streaming {pcm.size / RATE:.1f} s of audio", file=sys.stderr
        )
        sent, frame_sent = await converse(client, pcm, inputs, args.tail)
    received = client.received
    out: Path = args.out
    if received.video:
        save_video(out, received.video, started["fps"], received.audio, started["audio_out_rate"])
        print(f"# saved {out}", file=sys.stderr)
    wav = save_wav(out.with_suffix(".wav"), received.audio, started["audio_out_rate"])
    print(f"# saved {wav}", file=sys.stderr)
    print(
        "\n".join(
            [
                *stream_report(received, started["fps"]),
                "",
                *latency_report(reactions(received, sent, frame_sent), start=frame_sent[0]),
            ]
        )
    )
    return 0


def run(args: argparse.Namespace) -> int:
    """Run ``onstage client`` with parsed arguments; returns the exit status."""
    if args.out.suffix.lower() not in VIDEO_SUFFIXES:
        print(f"onstage client: --out must end in one of {', '.join(VIDEO_SUFFIXES)}", file=sys.stderr)
        return 2
    if args.out.suffix.lower() == ".mp4" and not mp4_available():
        print("onstage client: .mp4 needs PyAV (pip install av); use .webp or .gif", file=sys.stderr)
        return 2
    try:
        return asyncio.run(talk(args))
    except (OSError, ValueError, RuntimeError) as exc:
        print(f"onstage client: {exc}", file=sys.stderr)
        return 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``onstage client`` (the subcommand's parser is made by ``server.cli``)."""
    parser.add_argument("wav", nargs="?", type=Path, help="a WAV file to stream as the microphone")
    parser.add_argument("--url", default=DEFAULT_URL, help=f"the session endpoint (default {DEFAULT_URL})")
    parser.add_argument("--token", help="a client token (or ONSTAGE_TOKEN), for a server with a secret")
    parser.add_argument(
        "--gesture",
        action="append",
        default=[],
        type=timed("gesture"),
        metavar="SECONDS:NAME",
        help="send a gesture at a time, e.g. 2.5:wave (repeatable)",
    )
    parser.add_argument(
        "--text",
        action="append",
        default=[],
        type=timed("text"),
        metavar="SECONDS:TEXT",
        help='send text at a time, e.g. 4.0:"hello" (repeatable)',
    )
    parser.add_argument("--seed", type=int, help="the session's seed (same seed, same inputs: same frames)")
    parser.add_argument("--character", help="which character to talk to")
    parser.add_argument("--tail", type=float, default=2.0, help="seconds to keep listening after the end")
    default_out = "onstage-call.mp4" if mp4_available() else "onstage-call.webp"
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(default_out),
        help=f"the video file: .mp4 (with the voice), .webp or .gif (default {default_out}); "
        "the voice is also saved beside it as .wav",
    )
