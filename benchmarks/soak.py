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
import random
import sqlite3
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # for tests.support

from director import answer
from reaction import Microphone, Sound, sounds
from served import rss_mib, served, session_url
from soak_report import STALL_S, LateLog, Measured, Session, Soak, report

from server.client import SessionClient
from server.cpu_watch import machine_times
from tests.support.llm_server import LLMServer
from tests.support.observe import Families, families, observations

GESTURES = ["wave", "thumbs_up", "point", "raise_hand", "nod"]
LINES = ["Where does this path go?", "Can you wave at me?", "Open the gate!", "What was that noise?"]


def metric_families(base: str) -> Families:
    """The server's ``/metrics`` with every label (blocking: call in a thread)."""
    with urllib.request.urlopen(f"{base}/metrics", timeout=10) as response:
        return families(response.read().decode())


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
    audio: dict[str, list[Sound]],
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
            await mic.play(audio[kind][0].pcm)
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


async def sent_input(client: SessionClient, message: dict) -> str:
    ref = f"r{len(client.received.messages)}-{time.monotonic_ns()}"
    await client.send({**message, "ref": ref})
    answer = await client.wait_for(lambda m: m.get("ref") == ref, timeout=10)
    return str(answer.get("event_id", ""))


def story_store(path: Path, checkpoints: set[str]) -> tuple[str, int]:
    """SQLite's integrity check of the store, and how many announced checkpoints it lacks."""
    with sqlite3.connect(path) as db:
        integrity = db.execute("PRAGMA integrity_check").fetchone()[0]
        stored = {row[0] for row in db.execute("SELECT id FROM story_checkpoints")}
    return str(integrity), len(checkpoints - stored)


def parse_args() -> argparse.Namespace:
    """The command line (module docstring)."""
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
    return parser.parse_args()


def server_config(db: Path, base_url: str, server_toml: str) -> str:
    """The served server's config: the story store at ``db``, the Director's LLM at ``base_url``."""
    return f"""
[server]
story_db = "{db}"
{server_toml}

[director]
base_url = "{base_url}"
api_key = "soak"
model = "soak"
debounce_s = 0.05

[server.limits]
admission = "ceiling"  # admission is not what is measured here
"""


async def soak(args: argparse.Namespace) -> Soak:
    """Serve, run the main session with bystanders beside it, and check the story store after."""
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "stories.sqlite"
        async with LLMServer(default=answer(random.Random(args.seed), delay_s=(0.5, 2.0))) as llm:
            config = server_config(db, llm.base_url, args.server_toml)
            late_log = LateLog()
            async with (
                served(config, stderr=late_log.take) as base,
                SessionClient(session_url(base)) as client,
            ):
                session = await run_session(base, client, late_log, args)
            checkpoints = {
                h["checkpoint"]
                for m in client.received.of_type("story.state")
                for h in m["history"]
                if h.get("checkpoint")
            }
        integrity, missing = story_store(db, checkpoints)
    return Soak(session, client, late_log, len(llm.requests), checkpoints, integrity, missing)


async def run_session(
    base: str, client: SessionClient, late_log: LateLog, args: argparse.Namespace
) -> Session:
    """Start the main session, drive it (``measure``) with bystanders coming and going beside it, and read
    the server's figures after."""
    stats: Counter[str] = Counter()
    marks: list[float] = []
    # Piper makes the microphone's speech: in a thread, not on the loop that stamps frames.
    audio = await asyncio.to_thread(sounds, "synthetic")
    started = await client.start(director="llm", story="garden_gate", seed=args.seed)
    late_log.session = started["session_id"]
    watcher = asyncio.create_task(loop_stalls())
    stop = asyncio.Event()
    side = asyncio.create_task(bystander(session_url(base), stop, stats, marks))
    async with Microphone(client) as mic:
        measured = await measure(client, mic, audio, base, args)
    rss_end = rss_mib(base)
    stop.set()
    await side
    metrics = client.received.of_type("metrics")[-1]
    figures = await asyncio.to_thread(metric_families, base)
    lag = observations(measured.warm_metrics, figures, "onstage_event_loop_lag_seconds")
    overdue_voice = figures.get("onstage_session_voice_overdue", {}).get(
        ("onstage_session_voice_overdue_total", (("session", started["session_id"]),))
    )
    watcher.cancel()
    stalls = await watcher
    return Session(started, measured, stats, marks, rss_end, metrics, lag, overdue_voice, stalls)


async def measure(
    client: SessionClient,
    mic: Microphone,
    audio: dict[str, list[Sound]],
    base: str,
    args: argparse.Namespace,
) -> Measured:
    """Drive the main session through the warm-up, then for --minutes, reading the server's memory and
    figures and the machine's CPU times between them."""
    # Warm-up: everything the run does happens once (first runs of Whisper, Piper and
    # YAMNet, the Director, a rewind, the bystander) before memory is first read.
    rewinds: list[float] = []
    await drive(client, mic, audio, 60.0 if args.minutes >= 5 else 20.0, args.seed + 1, 30.0, rewinds)
    rss_start = rss_mib(base)
    warm_metrics = await asyncio.to_thread(metric_families, base)
    sampler = asyncio.create_task(rss_samples(base, 30.0))
    began = time.monotonic()
    cpu_start = machine_times()
    ids = await drive(client, mic, audio, 60.0 * args.minutes, args.seed, args.rewind_s, rewinds)
    span = (began, time.monotonic())
    cpu_end = machine_times()
    threads_after = await asyncio.to_thread(metric_families, base)
    sampler.cancel()
    rss_trend = await sampler
    return Measured(ids, rewinds, span, cpu_start, cpu_end, warm_metrics, threads_after, rss_start, rss_trend)


async def main(args: argparse.Namespace) -> None:
    """Run the soak and print its report."""
    report(await soak(args), args)


if __name__ == "__main__":
    uvloop.run(main(parse_args()))
