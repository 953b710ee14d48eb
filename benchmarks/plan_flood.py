"""A bystander's picture while another session floods plans: two sessions against a real ``onstage serve``.

    .venv/bin/python benchmarks/plan_flood.py                        # 20 s quiet, then 20 s of flood
    .venv/bin/python benchmarks/plan_flood.py --seconds 60 --rate 20
    .venv/bin/python benchmarks/plan_flood.py --behaviors 960         # the flood of issue 12 (refused now)

Each phase opens two fresh sessions. The bystander only watches; the other sends ``plan.run`` ``--rate``
times a second with ``agent.bounds.largest_plan`` (by default the costliest plan the bounds accept: 256
ten-minute gazes re-asked every second) during the flood phase, and only pings during the quiet one.
Reported for the bystander: frames received, the largest gap between two frames' arrivals, chunks that
arrived more than one chunk after the media clock (the earliest chunk of the phase sets where chunk 0 is
due), chunk lateness p99 / max, and how the server answered the plans.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections import Counter
from dataclasses import dataclass

import numpy as np
from served import served, session_url

from agent.bounds import MAX_SCRIPT_BEHAVIORS, largest_plan
from server.client import SessionClient
from server.media import MediaClock

WARMUP_S = 2.0
"""Media time the bystander receives before a phase is measured (a session's first chunks start slower)."""


@dataclass
class Phase:
    name: str
    frames: int
    max_gap_ms: float
    late_chunks: int
    chunks: int
    late_p99_ms: float
    late_max_ms: float
    answers: Counter[str]


async def phase(url: str, name: str, seconds: float, rate: float, behaviors: int | None) -> Phase:
    """One phase: a bystander watches for ``seconds`` while the other session floods (``behaviors`` set)
    or only pings (None)."""
    async with SessionClient(url) as bystander, SessionClient(url) as flooder:
        started = await bystander.start(seed=1)
        await flooder.start(seed=2)
        chunk_s = MediaClock(started["fps"], started["chunk_frames"]).chunk_s
        warm = round(WARMUP_S / chunk_s)  # 12 chunks at the tiny model's clock
        await bystander.wait_frame(lambda f: f.header["chunk"] >= warm, timeout=60)
        since = len(bystander.received.video)
        answered = len(flooder.received.messages)
        message = (
            {"type": "plan.run", "plan": largest_plan(behaviors)}
            if behaviors is not None
            else {"type": "ping"}
        )
        text = json.dumps({**message, "ref": "flood"})  # encoded once: the client's work stays small
        assert flooder.ws is not None
        end = time.monotonic() + seconds
        while (now := time.monotonic()) < end:
            await flooder.ws.send(text)
            await asyncio.sleep(max(0.0, now + 1.0 / rate - time.monotonic()))
        await flooder.send({"type": "ping", "ref": "last"})
        await flooder.wait_type("pong", ref="last", timeout=30)
        answers = Counter(
            m.get("code", m["type"])
            for _, m in flooder.received.messages[answered:]
            if m.get("ref") == "flood"
        )
        frames = bystander.received.video[since:]
    times = np.array([f.t for f in frames])
    arrival: dict[int, float] = {}
    for f in frames:
        arrival.setdefault(f.header["chunk"], f.t)
    chunks = np.array(sorted(arrival))
    behind = np.array([arrival[c] for c in chunks]) - chunks * chunk_s
    late_ms = (behind - behind.min()) * 1000.0
    return Phase(
        name=name,
        frames=len(frames),
        max_gap_ms=float(np.diff(times).max() * 1000.0),
        late_chunks=int(np.sum(late_ms > chunk_s * 1000.0)),
        chunks=int(chunks.size),
        late_p99_ms=float(np.percentile(late_ms, 99)),
        late_max_ms=float(late_ms.max()),
        answers=answers,
    )


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each phase")
    parser.add_argument("--rate", type=float, default=20.0, help="plan.run messages a second while flooding")
    parser.add_argument("--behaviors", type=int, default=MAX_SCRIPT_BEHAVIORS, help="behaviors per plan")
    args = parser.parse_args()
    config = "[server.limits]\nresume_grace_s = 0.5\n"
    async with served(config) as base:
        url = session_url(base)
        phases = [
            await phase(url, "quiet (pings)", args.seconds, args.rate, None),
            await phase(url, f"flood ({args.behaviors} behaviors)", args.seconds, args.rate, args.behaviors),
        ]
    print(
        f"## A bystander session while another floods plan.run ({args.rate:g}/s, {args.seconds:g} s each)\n"
    )
    print(
        "| phase | frames | largest frame gap (ms) | late chunks | lateness p99 / max (ms) | answers to the flood |"
    )
    print("|---|---:|---:|---:|---:|---|")
    for p in phases:
        answers = ", ".join(f"{k} {v}" for k, v in sorted(p.answers.items()))
        print(
            f"| {p.name} | {p.frames} | {p.max_gap_ms:.0f} | {p.late_chunks} / {p.chunks} | "
            f"{p.late_p99_ms:.0f} / {p.late_max_ms:.0f} | {answers} |"
        )


if __name__ == "__main__":
    asyncio.run(main())
