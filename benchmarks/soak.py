"""A long session with everything at once, against a real server: does anything stall, leak or get lost?

    .venv/bin/python benchmarks/soak.py                 # 10 minutes
    .venv/bin/python benchmarks/soak.py --minutes 2     # a shorter look

A real ``onstage serve`` (its own process, a story database in a file) and a real local chat-completions
endpoint (``tests/support/llm_server.py``) that answers each Director run with say + perform after
0.5-2 s (the Director benchmark's endpoint). The main session plays the ``garden_gate`` story with the LLM as its mind, while the client
speaks into its microphone (Piper speech), claps and knocks, waves, types, and rewinds the story to its
first beat every ``--rewind-s``; beside it a second session opens, streams a few seconds and closes, again
and again.

Reported (a markdown table): the main session's on-time share (the server's own count), frame-rate
windows (share of 1 s windows with >= 23.5 fps, as the reaction benchmark judges them), the largest gap
between two video frames at the client, each of those also by the server's send times (the video
header's ``sent_ms``: this client shares the machine with the server, so a frame it stamps late may have
been sent on time), how many inputs of each kind were answered (a reflecting frame
or an ``input.outcome``), the server's resident memory after the warm-up minute and at the end, and the
story store after the server stopped: SQLite's integrity check and whether every checkpoint the client
was told about is in it. The warm-up (the first minute) drives the session as the run does, so that memory
is read after every kind of work has happened once; besides the two readings, the trend of readings every
30 s says whether memory keeps growing.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import random
import re
import sqlite3
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path

import numpy as np
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # for tests.support

from director import answer
from reaction import Microphone, sounds, window_counts, window_edges
from served import rss_mib, served, session_url

from server.client import SessionClient
from server.cpu_watch import machine_times
from tests.support.llm_server import LLMServer
from tests.support.observe import Families, families, observations

WINDOW_SLACK_FRAMES = 0.5
"""A 1 s window counts as full at the session's fps less this (23.5 fps at 24)."""
NEAR_S = 1.5
"""Late chunks this close to a bystander's start or end are counted apart (a neighbour's warm-up or teardown)."""
GESTURES = ["wave", "thumbs_up", "point", "raise_hand", "nod"]
LINES = ["Where does this path go?", "Can you wave at me?", "Open the gate!", "What was that noise?"]


def metric_families(base: str) -> Families:
    """The server's ``/metrics`` with every label (blocking: call in a thread)."""
    with urllib.request.urlopen(f"{base}/metrics", timeout=10) as response:
        return families(response.read().decode())


def windows(times: list[float], fps: float, full: float, rewinds: list[float]) -> tuple[float, int, int]:
    """The 1 s windows of a ``fps`` stream as the reaction benchmark counts them (from half a frame before
    a frame is due: windows starting on a frame read one that came a millisecond early as 25 fps beside
    23): the share holding at least ``full`` frames, how many hold fewer, and how many of those overlap
    the 2 s after one of the ``rewinds`` (where the picture jumps back to a checkpoint)."""
    t = np.asarray(times)
    starts, counts = window_edges(t, fps), window_counts(t, fps)
    short = starts[counts < full]
    near = sum(any(r - 1.0 < s < r + 2.0 for r in rewinds) for s in short)
    return (float(np.mean(counts >= full)) if counts.size else 0.0), short.size, near


async def bystander(url: str, stop: asyncio.Event, stats: Counter[str], marks: list[float]) -> None:
    """Open a session, stream 5 s, close, wait 5 s, again until ``stop``; ``marks`` gets the time each
    started and each ended."""
    while not stop.is_set():
        async with SessionClient(url) as client:
            try:
                await client.start(seed=7)
            except RuntimeError:  # refused (the server at capacity): counted, tried again later
                stats["bystander refused"] += 1
            else:
                marks.append(time.monotonic())
                await asyncio.sleep(5.0)
                stats["bystander sessions"] += 1
        marks.append(time.monotonic())
        with_timeout = asyncio.ensure_future(stop.wait())
        await asyncio.wait({with_timeout}, timeout=5.0)
        with_timeout.cancel()


async def drive(
    client: SessionClient,
    mic: Microphone,
    audio: dict[str, np.ndarray],
    seconds: float,
    seed: int,
    rewind_s: float,
    rewinds: list[float],
) -> list[str]:
    """The user's side of the main session for ``seconds``, rewinding the story every ``rewind_s`` (the
    times it sent them appended to ``rewinds``); returns the event ids of its inputs."""
    rng = random.Random(seed)
    ids: list[str] = []
    end = time.monotonic() + seconds
    n = itertools.count()
    next_rewind = time.monotonic() + rewind_s
    while time.monotonic() < end:
        i = next(n)
        kind = ("speech", "clap", "gesture", "knock", "text", "gesture")[i % 6]
        if kind in audio:
            await mic.play(audio[kind])
        elif kind == "gesture":
            ids.append(await sent_input(client, {"type": "input.gesture", "gesture": rng.choice(GESTURES)}))
        else:
            ids.append(await sent_input(client, {"type": "input.text", "text": rng.choice(LINES)}))
        if time.monotonic() >= next_rewind:
            next_rewind += rewind_s
            states = client.received.of_type("story.state")
            first = next((h["checkpoint"] for h in states[-1]["history"] if h.get("checkpoint")), None)
            if first is not None:
                rewinds.append(time.monotonic())
                await client.send({"type": "story.rewind", "checkpoint": first})
        await asyncio.sleep(rng.uniform(2.0, 4.0))
    return ids


async def rss_samples(base: str, every_s: float) -> list[tuple[float, float]]:
    """(minute, MiB) readings of the server's resident memory every ``every_s`` until cancelled."""
    began, out = time.monotonic(), []
    try:
        while True:
            out.append(((time.monotonic() - began) / 60.0, rss_mib(base)))
            await asyncio.sleep(every_s)
    except asyncio.CancelledError:
        return out


STALL_S = 0.05
"""A pause of this process's event loop longer than this is a stall of the measuring client."""
GAP_S = 0.1
"""A gap between frames longer than this is a stall of the picture (as the client saw it)."""


async def loop_stalls(every_s: float = 0.01) -> list[tuple[float, float]]:
    """(from, to) of every time this process's event loop was held longer than ``STALL_S`` beyond a
    ``every_s`` sleep, until cancelled: frames that arrived meanwhile were stamped late by the client."""
    out = []
    try:
        while True:
            before = time.monotonic()
            await asyncio.sleep(every_s)
            after = time.monotonic()
            if after - before - every_s > STALL_S:
                out.append((before + every_s, after))
    except asyncio.CancelledError:
        return out


def gaps_in_stalls(
    times: list[float], sent: list[float], stalls: list[tuple[float, float]]
) -> tuple[int, int, int]:
    """Frame gaps longer than ``GAP_S`` at the client, how many of them overlap a stall of the client's own
    loop, and how many the server also sent with a gap that long (``sent``: its send times, in seconds)."""
    gaps = [n for n, (a, b) in enumerate(itertools.pairwise(times)) if b - a > GAP_S]
    in_stalls = sum(any(s < times[n + 1] and e > times[n] for s, e in stalls) for n in gaps)
    return len(gaps), in_stalls, sum(sent[n + 1] - sent[n] > GAP_S for n in gaps)


def near_marks(
    late: list[float], marks: list[float], within_s: float, span_s: float
) -> tuple[int, int, float]:
    """Of the times ``late`` (late chunks), how many fell within ``within_s`` of a mark (a bystander
    starting or ending) and how many elsewhere, and the share of a run of ``span_s`` that near a mark."""
    edges = np.asarray(marks)
    near = sum(bool(edges.size) and float(np.min(np.abs(edges - t))) <= within_s for t in late)
    gaps = np.diff(edges) if edges.size > 1 else np.zeros(0)
    covered = 2 * within_s + float(np.minimum(gaps, 2 * within_s).sum()) if marks else 0.0
    return near, len(late) - near, min(1.0, covered / span_s) if span_s else 0.0


CORES = re.compile(r"([a-z][a-z0-9 \-]*?) (\d+\.\d+)(?: \((\d+\.\d+) waiting\))?")
"""A ``kind cores`` pair of a late chunk's CPU note (``server.cpu_watch.CpuWatch.note``), with the cores'
worth that kind waited runnable, if it says."""


class LateLog:
    """When the server logged each of a session's late chunks (its warning, timed on this clock), and the
    cores each kind of thread (run, waited) and the machine used in the second before (the CPU note)."""

    def __init__(self) -> None:
        self.session = ""
        self.times: list[float] = []
        self.cpu: list[dict[str, tuple[float, float]]] = []

    def take(self, line: str) -> None:
        if self.session and f"session {self.session}: chunk" in line and " late;" in line:
            self.times.append(time.monotonic())
            note = line.partition("in cores: ")[2].replace(" of ", " ")
            self.cpu.append({kind: (float(run), float(wait or 0)) for kind, run, wait in CORES.findall(note)})

    def cpu_before(self, span: tuple[float, float]) -> str:
        """The mean cores of each kind in the seconds before the late chunks within ``span``, busiest first."""
        notes = [cpu for t, cpu in zip(self.times, self.cpu, strict=True) if span[0] <= t <= span[1] and cpu]
        mean = {
            kind: tuple(sum(cpu.get(kind, (0.0, 0.0))[i] for cpu in notes) / len(notes) for i in (0, 1))
            for kind in {k for cpu in notes for k in cpu}
        }
        return ", ".join(
            f"{kind} {run:.2f}" + (f" ({wait:.2f} waiting)" if wait >= 0.005 else "")
            for kind, (run, wait) in sorted(mean.items(), key=lambda kv: -kv[1][0])
        )


def thread_cores(before: Families, after: Families, span_s: float) -> str:
    """Cores each kind of the server's threads ran, and waited runnable, between two readings of its
    ``/metrics`` ``span_s`` apart, busiest first."""

    def per_kind(families: Families, name: str) -> dict[str, float]:
        samples = families.get(name, {})
        return {dict(labels)["kind"]: value for (_, labels), value in samples.items()}

    runs = [per_kind(f, "onstage_thread_cpu_seconds") for f in (before, after)]
    waits = [per_kind(f, "onstage_thread_runnable_wait_seconds") for f in (before, after)]
    cores = {
        kind: (
            (runs[1][kind] - runs[0].get(kind, 0.0)) / span_s,
            (waits[1][kind] - waits[0].get(kind, 0.0)) / span_s,
        )
        for kind in runs[1]
    }
    return ", ".join(
        f"{kind} {run:.2f} ({wait:.2f} waiting)"
        for kind, (run, wait) in sorted(cores.items(), key=lambda kv: -kv[1][0])
        if run >= 0.005
    )


def on_client_clock(times: list[float], sent: list[float]) -> list[float]:
    """The server's send times moved onto the client's clock by their median offset (so that the rewinds,
    stamped here, fall where they did among them)."""
    offset = float(np.median(np.asarray(times) - np.asarray(sent)))
    return [t + offset for t in sent]


def slope(readings: list[tuple[float, float]]) -> float:
    """MiB a minute: the least-squares line through the readings (0 with fewer than two)."""
    if len(readings) < 2:
        return 0.0
    minutes, mib = np.asarray(readings).T
    return float(np.polyfit(minutes, mib, 1)[0])


async def sent_input(client: SessionClient, message: dict) -> str:
    ref = f"r{len(client.received.messages)}-{time.monotonic_ns()}"
    await client.send({**message, "ref": ref})
    answer = await client.wait_for(lambda m: m.get("ref") == ref, timeout=10)
    return str(answer.get("event_id", ""))


def answered(client: SessionClient, ids: list[str]) -> Counter[str]:
    """How the inputs (sent ones and those the server heard in the audio) came out."""
    heard = [
        m["event_id"]
        for kind in ("input.speech_started", "input.sound")
        for m in client.received.of_type(kind)
    ]
    told = {m["event_id"] for m in client.received.of_type("input.outcome")}
    out: Counter[str] = Counter()
    for event_id in [*ids, *heard]:
        if client.received.first_reflecting(event_id) is not None:
            out["reflected"] += 1
        elif event_id in told:
            out["told why not"] += 1
        else:
            out["unanswered"] += 1
            said = [(t, m) for t, m in client.received.messages if m.get("event_id") == event_id]
            print(f"unanswered: {event_id}: {said}", file=sys.stderr)
    return out


def story_store(path: Path, checkpoints: set[str]) -> tuple[str, int]:
    """SQLite's integrity check of the store, and how many announced checkpoints it lacks."""
    with sqlite3.connect(path) as db:
        integrity = db.execute("PRAGMA integrity_check").fetchone()[0]
        stored = {row[0] for row in db.execute("SELECT id FROM story_checkpoints")}
    return str(integrity), len(checkpoints - stored)


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "stories.sqlite"
        async with LLMServer(default=answer(random.Random(args.seed), delay_s=(0.5, 2.0))) as llm:
            config = f"""
[server]
story_db = "{db}"
{args.server_toml}

[director]
base_url = "{llm.base_url}"
api_key = "soak"
model = "soak"
debounce_s = 0.05
"""
            stats: Counter[str] = Counter()
            marks: list[float] = []
            late_log = LateLog()
            async with (
                served(config, stderr=late_log.take) as base,
                SessionClient(session_url(base)) as client,
            ):
                # Piper makes the microphone's speech: in a thread, not on the loop that stamps frames.
                audio = await asyncio.to_thread(sounds)
                started = await client.start(director="llm", story="garden_gate", seed=args.seed)
                late_log.session = started["session_id"]
                watcher = asyncio.create_task(loop_stalls())
                stop = asyncio.Event()
                side = asyncio.create_task(bystander(session_url(base), stop, stats, marks))
                async with Microphone(client) as mic:
                    # Warm-up: everything the run does happens once (first runs of Whisper, Piper and
                    # YAMNet, the Director, a rewind, the bystander) before memory is first read.
                    rewinds: list[float] = []
                    await drive(
                        client, mic, audio, 60.0 if args.minutes >= 5 else 20.0, args.seed + 1, 30.0, rewinds
                    )
                    rss_start = rss_mib(base)
                    warm_metrics = await asyncio.to_thread(metric_families, base)
                    sampler = asyncio.create_task(rss_samples(base, 30.0))
                    measured = (time.monotonic(), 0.0)
                    cpu_start = machine_times()
                    ids = await drive(
                        client, mic, audio, 60.0 * args.minutes, args.seed, args.rewind_s, rewinds
                    )
                    measured = (measured[0], time.monotonic())
                    cpu_end = machine_times()
                    threads_after = await asyncio.to_thread(metric_families, base)
                    sampler.cancel()
                    rss_trend = await sampler
                rss_end = rss_mib(base)
                stop.set()
                await side
                metrics = client.received.of_type("metrics")[-1]
                figures = await asyncio.to_thread(metric_families, base)
                lag = observations(warm_metrics, figures, "onstage_event_loop_lag_seconds")
                overdue_voice = figures.get("onstage_session_voice_overdue", {}).get(
                    ("onstage_session_voice_overdue_total", (("session", started["session_id"]),))
                )
                watcher.cancel()
                stalls = await watcher
            checkpoints = {
                h["checkpoint"]
                for m in client.received.of_type("story.state")
                for h in m["history"]
                if h.get("checkpoint")
            }
        integrity, missing = story_store(db, checkpoints)
    times = [f.t for f in client.received.video]
    sent = on_client_clock(times, [f.header["sent_ms"] / 1000.0 for f in client.received.video])
    gaps, sent_gaps = np.diff(times) * 1000.0, np.diff(sent) * 1000.0
    outcome = answered(client, ids)
    full = started["fps"] - WINDOW_SLACK_FRAMES
    late_near, late_away, near_share = near_marks(
        [t for t in late_log.times if measured[0] <= t <= measured[1]],
        [t for t in marks if measured[0] - NEAR_S <= t <= measured[1] + NEAR_S],
        NEAR_S,
        measured[1] - measured[0],
    )
    full_share, short, near = windows(times, started["fps"], full, rewinds)
    sent_share, sent_short, sent_near = windows(sent, started["fps"], full, rewinds)
    rows = [
        ("minutes", f"{args.minutes:g}"),
        ("video frames received", f"{len(times)}"),
        ("chunks on time (server)", f"{100 * metrics['on_time']:.2f} %"),
        ("chunks decided without their voice's audio, past their deadline (`on_time`)", f"{overdue_voice}"),
        (
            "the server's event loop: timers run over 20 / 50 / 100 ms late, of timers due every 50 ms",
            " / ".join(f"{lag['count'] - lag[le]:.0f}" for le in ("0.02", "0.05", "0.1"))
            + f" of {lag['count']:.0f}",
        ),
        (f"1 s windows with >= {full:g} fps", f"{100 * full_share:.2f} %"),
        (f"1 s windows short of {full:g} fps / of them within 2 s after a story rewind", f"{short} / {near}"),
        ("the same, by the server's send times (`sent_ms`)", f"{100 * sent_share:.2f} %"),
        ("the same, short / within 2 s after a rewind", f"{sent_short} / {sent_near}"),
        (
            "largest frame gap: at the client / as the server sent them",
            f"{gaps.max():.0f} / {sent_gaps.max():.0f} ms",
        ),
        (
            "frame gap p99: at the client / as sent",
            f"{np.percentile(gaps, 99):.1f} / {np.percentile(sent_gaps, 99):.1f} ms",
        ),
        (
            f"frame gaps over {1000 * GAP_S:.0f} ms at the client / of them while this client's own loop "
            "stalled / of them sent that far apart by the server",
            " / ".join(str(n) for n in gaps_in_stalls(times, sent, stalls)),
        ),
        (
            f"this client's loop stalls over {1000 * STALL_S:.0f} ms: count / longest",
            f"{len(stalls)} / {max((1000 * (e - s) for s, e in stalls), default=0.0):.0f} ms",
        ),
        (
            "inputs: reflected / told why not / unanswered",
            f"{outcome['reflected']} / {outcome['told why not']} / {outcome['unanswered']}",
        ),
        ("Director calls", f"{len(llm.requests)}"),
        ("story rewinds sent", f"{int(60 * args.minutes // args.rewind_s)}"),
        (
            "bystander sessions opened and closed / refused",
            f"{stats['bystander sessions']} / {stats['bystander refused']}",
        ),
        (
            f"late chunks after the warm-up (the server's log): within {NEAR_S:g} s of a bystander's start or "
            "end / elsewhere (share of that time this near)",
            f"{late_near} / {late_away} ({100 * near_share:.0f} %)",
        ),
        (
            f"the machine's cores busy / stolen by the hypervisor, mean over the run (of {os.cpu_count()})",
            " / ".join(
                f"{(b - a) / (measured[1] - measured[0]):.2f}"
                for a, b in zip(cpu_start, cpu_end, strict=True)
            ),
        ),
        (
            "the server's threads over the run, in cores: run (waited runnable), by kind (`/metrics`)",
            thread_cores(warm_metrics, threads_after, measured[1] - measured[0]),
        ),
        (
            "cores used in the second before a late chunk after the warm-up, mean (the warning's CPU note)",
            late_log.cpu_before(measured) or "-",
        ),
        (
            "server RSS after warm-up -> end",
            f"{rss_start:.0f} -> {rss_end:.0f} MiB ({100 * (rss_end / rss_start - 1):+.1f} %)",
        ),
        ("server RSS trend (least squares over 30 s readings)", f"{slope(rss_trend):+.2f} MiB a minute"),
        ("story store integrity", integrity),
        ("announced checkpoints missing from the store", f"{missing} of {len(checkpoints)}"),
    ]
    print("| measure | value |\n|---|---|")
    print("\n".join(f"| {name} | {value} |" for name, value in rows))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rewind-s", type=float, default=90.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--server-toml",
        default="",
        help="lines for the [server] table, e.g. 'backend_options = {steps = \"1\"}'",
    )
    uvloop.run(main(parser.parse_args()))
