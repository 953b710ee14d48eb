"""A bystander session while other connections misbehave: does it stream on as if nothing happened?

    .venv/bin/python benchmarks/faults.py                  # four phases of 20 s
    .venv/bin/python benchmarks/faults.py --seconds 60

A real ``onstage serve`` (benchmarks/served.py) with room for two live sessions (what two cores keep
real-time). One bystander session streams throughout, measured over four phases of ``--seconds`` each:
quiet; clients vanishing mid-handshake (half an HTTP request; an upgrade and nothing more), right after
``session.start`` and while sending audio (the TCP connection reset, no WebSocket close), with a storm of
starts beyond capacity each cycle; a connection that has stopped reading (a raw socket read at 1 byte/s)
holding the other slot while storms find none; and a reader at 9 KiB/s pinging once a second. Per phase:
the bystander's frames, its largest gap between frames, its on-time share (frames that arrived within
one chunk of the media clock, as in benchmarks/reaction.py), and what the faults met.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # for tests.support

from served import served, session_url

from server.client import SessionClient, VideoFrame
from server.media import MediaClock
from tests.support.slow_client import SlowClient

CAPACITY = 2  # the bystander and one more: what two cores keep real-time
SLOW_RATE = 9 * 1024
PAUSE_S = 1.0  # between cycles of vanishing clients: each cycle builds up to three real sessions
STORM = 8

SERVER_CONFIG = f"""
[server.limits]
admission = "ceiling"  # admission is not what is measured here
max_sessions = {CAPACITY}
max_waiting_sessions = 4
resume_grace_s = 2.0
"""


@dataclass
class Tally:
    cycles: int = 0
    refused: int = 0
    admitted: int = 0
    other_errors: int = 0


def abort(client: SessionClient) -> None:
    assert client.ws is not None
    client.ws.transport.abort()


async def half_handshakes(url: str) -> None:
    parts = urlsplit(url)
    for request in (b"", b"GET /v1/session HTTP/1.1\r\nHost: x\r\nUpgrade: webs"):
        _, writer = await asyncio.open_connection(parts.hostname, parts.port)
        writer.write(request)
        await writer.drain()
        writer.transport.abort()
    upgraded = SessionClient(url)
    await upgraded.__aenter__()
    abort(upgraded)


async def start_and_vanish(url: str, seed: int) -> None:
    client = SessionClient(url)
    await client.__aenter__()
    await client.send({"type": "session.start", "seed": seed})
    abort(client)


async def talk_and_vanish(url: str, seed: int, tally: Tally) -> None:
    tone = (8000 * np.sin(np.arange(320) * 2 * np.pi * 220 / 16000)).astype("<i2").tobytes()
    client = SessionClient(url)
    await client.__aenter__()
    try:
        await client.start(seed=seed)
    except RuntimeError:
        tally.refused += 1
        await client.close()
        return
    for _ in range(25):
        await client.send_audio(tone)
        await asyncio.sleep(0.02)
    abort(client)


async def storm(url: str, seed: int, tally: Tally) -> None:
    clients = [SessionClient(url) for _ in range(STORM)]
    async with contextlib.AsyncExitStack() as stack:
        for client in clients:
            await stack.enter_async_context(client)
        answers = await asyncio.gather(
            *(c.start(seed=seed + i) for i, c in enumerate(clients)), return_exceptions=True
        )
    for answer in answers:
        if isinstance(answer, dict):
            tally.admitted += 1
        elif "capacity" in str(answer):
            tally.refused += 1
        else:
            tally.other_errors += 1


async def faults(url: str, until: float, tally: Tally) -> None:
    seed = 100
    while time.monotonic() < until:
        await half_handshakes(url)
        await start_and_vanish(url, seed)
        await talk_and_vanish(url, seed + 1, tally)
        await storm(url, seed + 2, tally)
        tally.cycles += 1
        seed += 20
        await asyncio.sleep(PAUSE_S)


async def ping_slowly(client: SlowClient, until: float) -> list[float]:
    """Ping once a second until ``until``; the seconds each pong took."""
    delays: list[float] = []
    while time.monotonic() < until:
        await asyncio.sleep(1.0)
        ref = f"p{len(delays)}"
        sent = await client.send({"type": "ping", "ref": ref})
        got, _ = await client.wait_for(lambda m, r=ref: m.get("type") == "pong" and m["ref"] == r, 60)
        delays.append(got - sent)
    return delays


def worst_lag(client: SlowClient) -> float:
    """How far behind the media clock the slow reader's frames came, at worst (s)."""
    video = client.video()
    offset = min(a.t - a.header["pts_ms"] / 1000 for a in video)
    return max(a.t - offset - a.header["pts_ms"] / 1000 for a in video)


def timing(frames: list[VideoFrame], offset: float, chunk_s: float) -> tuple[int, float, float]:
    """(frames, largest gap between arrivals in ms, share that arrived within a chunk (``chunk_s``) of the
    clock)."""
    t = np.array([f.t for f in frames])
    lag = t - offset - np.array([f.header["pts_ms"] for f in frames]) / 1000
    gap = float(np.diff(t).max()) * 1000 if len(t) > 1 else float("nan")
    return len(frames), gap, float(np.mean(lag <= chunk_s))


async def stalled_reader(url: str, until: float, tally: Tally) -> str:
    """A connection that stops reading holds the second slot; storms meanwhile find none."""
    async with SlowClient(url, rate=1) as stalled:
        await stalled.send({"type": "session.start", "seed": 2})
        seed = 300
        while time.monotonic() < until:
            await asyncio.sleep(1.0)
            await storm(url, seed, tally)
            seed += 20
    return "a reader stalled at 1 byte/s holds the other slot; a storm of starts every second"


async def slow_reader(url: str, until: float) -> str:
    """A 9 KiB/s reader pings once a second: its worst pong, and how late its frames came."""
    async with SlowClient(url, rate=SLOW_RATE) as slow:
        await slow.send({"type": "session.start", "seed": 3})
        pongs = await ping_slowly(slow, until)
        lag = worst_lag(slow)
        frames = len(slow.video())
    return (
        f"a {SLOW_RATE // 1024} KiB/s reader: {frames} video frames, worst pong {max(pongs):.2f} s "
        f"({len(pongs)} pings), its frames at worst {lag:.2f} s behind the media clock"
    )


async def vanishing(url: str, until: float, tally: Tally) -> str:
    await faults(url, until, tally)
    return (
        f"{tally.cycles} cycles of: 2 half handshakes, an upgrade and nothing more, a start then a reset, "
        f"0.5 s of audio then a reset, a storm of {STORM} starts; {PAUSE_S:g} s apart"
    )


async def main(args: argparse.Namespace) -> None:
    rows = []
    async with contextlib.AsyncExitStack() as stack:
        url = session_url(await stack.enter_async_context(served(SERVER_CONFIG)))
        bystander = await stack.enter_async_context(SessionClient(url))
        started = await bystander.start(seed=1)
        clock = MediaClock(started["fps"], started["chunk_frames"])
        # Past the warm-up: a second of chunks (6 at the tiny model's clock).
        await bystander.wait_frame(lambda f: f.header["chunk"] >= round(1.0 / clock.chunk_s), timeout=60)
        tally = Tally()
        phases = {
            "quiet": lambda end: asyncio.sleep(end - time.monotonic(), "nothing else happens"),
            "vanishing clients, storms": lambda end: vanishing(url, end, tally),
            "stalled reader": lambda end: stalled_reader(url, end, tally),
            "slow reader": lambda end: slow_reader(url, end),
        }
        for name, phase in phases.items():
            print(f"phase: {name}", file=sys.stderr)
            began = time.monotonic()
            what = await phase(began + args.seconds)
            rows.append((name, began, time.monotonic(), what))
        errors = bystander.received.of_type("error")
    video = bystander.received.video
    offset = min(f.t - f.header["pts_ms"] / 1000 for f in video)
    print(f"## A bystander session while other connections fail ({args.seconds:g} s per phase)\n")
    print("| phase | bystander frames | largest gap ms | on time (within a chunk) | what happened |")
    print("|---|---|---|---|---|")
    for name, began, ended, what in rows:
        n, gap, on_time = timing([f for f in video if began <= f.t < ended], offset, clock.chunk_s)
        print(f"| {name} | {n} | {gap:.0f} | {100 * on_time:.1f} % | {what} |")
    print(
        f"\nStarts in storms: admitted {tally.admitted}, refused as beyond capacity {tally.refused}, other "
        f"errors {tally.other_errors}. Errors the bystander got: {len(errors)}."
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each phase")
    asyncio.run(main(parser.parse_args()))
