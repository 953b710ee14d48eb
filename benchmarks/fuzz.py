"""A long fuzz run against a real server: every input answered, no crash, no session that stops streaming.

    .venv/bin/python benchmarks/fuzz.py [--inputs 100000] [--sessions 4] [--rate 200] [--pool 4000] [--seed 1]

A real ``onstage serve`` in its own process. Hypothesis draws a pool of ``--pool`` inputs from the
strategies of ``tests/support/fuzzing.py`` (tame: the known bugs of issue 12 would hang the server); the
run then sends ``--inputs`` inputs, each drawn from the pool as it is or garbled by ``fuzzing.remix``
(hypothesis alone draws ~150 inputs a second, too few for a long run). The inputs go over ``--sessions``
fuzzed sessions one after another, each input followed by a ``ping`` probe and judged like the live test
does (``tests/support/fuzz_session.py``), at most ``--rate`` inputs a second. A fatal close ends a session;
the next one takes over its share. Meanwhile a bystander session that nobody talks to records the gaps
between its video frames. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import random
import sys
import time
import warnings
from pathlib import Path

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # for tests.support

from served import served, session_url

from server.client import SessionClient
from tests.support import fuzzing
from tests.support.fuzz_session import FuzzFeeder

CONFIG = """
[server.limits]
admission = "ceiling"  # admission is not what is measured here
# Inputs and probes go far faster than a person types; everything else stays as served.
messages_per_s = 2000.0
message_burst = 2000.0
resume_grace_s = 1.0
"""


def server_pid() -> int:
    """The ``onstage serve`` child of this process."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == os.getpid() and b"server.cli" in cmdline:
            return int(entry.name)
    raise RuntimeError("no onstage serve child found")


def alive_pid(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


async def bystander(url: str, stop: asyncio.Event, out: dict[str, float]) -> None:
    """A session nobody talks to: the largest gap between two of its video frames, once streaming."""
    async with SessionClient(url) as client:
        await client.start(seed=99)
        await client.wait_frame(lambda f: True, timeout=60)
        last = client.received.video[-1].t
        out["max_gap_s"] = 0.0
        while not stop.is_set():
            await asyncio.sleep(1.0)
            video = client.received.video
            for frame in video:
                if frame.t > last:
                    out["max_gap_s"] = max(out["max_gap_s"], frame.t - last)
                    last = frame.t
            del video[:-1]
            del client.received.audio[:], client.received.messages[:]
            out["closed"] = float(client.ws is not None and client.ws.close_code is not None)


async def fuzz(args: argparse.Namespace) -> None:
    warnings.simplefilter("ignore")  # hypothesis warns of its own strategies' long reprs
    started = time.monotonic()
    pool = fuzzing.draw_examples(fuzzing.client_frames(tame=True), args.pool, args.seed)
    pool_s = time.monotonic() - started
    rng = random.Random(args.seed)
    async with served(CONFIG) as base:
        pid = server_pid()
        url = session_url(base)
        stop, watch = asyncio.Event(), {"max_gap_s": float("nan"), "closed": 0.0}
        watcher = asyncio.create_task(bystander(url, stop, watch))
        await asyncio.sleep(5.0)  # the bystander and the server warm up before the first figure
        rss_start = rss_mb(pid)
        sent = errors = accepted = sessions = stalled = broken = 0
        closes: collections.Counter[str] = collections.Counter()
        problems: list[str] = []
        share = -(-args.inputs // args.sessions)
        t0 = time.monotonic()
        while sent < args.inputs:
            sessions += 1
            async with SessionClient(url) as client:
                await client.start(seed=sessions)
                await client.wait_frame(lambda f: True, timeout=60)
                feeder = FuzzFeeder(client, trim=True)
                goal = min(args.inputs, sent + share)
                while sent < goal and feeder.tally.closed is None:
                    await feeder.feed(fuzzing.remix(pool, rng))
                    sent += 1
                    if (ahead := t0 + sent / args.rate - time.monotonic()) > 0:
                        await asyncio.sleep(ahead)
                if feeder.tally.closed is None:
                    await feeder.check_streaming()
            tally = feeder.tally
            errors, accepted = errors + tally.errors, accepted + tally.accepted
            stalled += tally.stalls > 0
            if tally.closed is not None:
                closes[tally.closed.rsplit(": ", 1)[-1]] += 1
            broken += len(tally.problems) - tally.stalls - (tally.closed in tally.problems)
            problems += tally.problems
        run_s = time.monotonic() - t0
        stop.set()
        await watcher
        alive = alive_pid(pid)
        rss_end = rss_mb(pid) if alive else float("nan")
    for problem in problems[:20]:
        print(f"problem: {problem}", file=sys.stderr)
    print(
        f"\n`benchmarks/fuzz.py --inputs {args.inputs} --sessions {args.sessions} --rate {args.rate} "
        f"--pool {args.pool} --seed {args.seed}`: pool drawn in {pool_s:.0f} s, inputs sent in {run_s:.0f} s\n"
    )
    print("| figure | value |")
    print("|---|---|")
    rows = [
        ("inputs sent", f"{sent}"),
        ("fuzzed sessions (one after another)", f"{sessions}"),
        ("errors answered", f"{errors}"),
        ("inputs accepted into a session", f"{accepted}"),
        ("answers that broke the contract", f"{broken}"),
        ("connections closed (why)", f"{sum(closes.values())}" + (f" ({dict(closes)})" if closes else "")),
        ("sessions that stopped streaming (no frame within 2 s)", f"{stalled}"),
        ("server crashes", f"{0 if alive else 1}"),
        ("server RSS at start / end (MiB)", f"{rss_start:.0f} / {rss_end:.0f}"),
        ("largest frame gap of the bystander (ms)", f"{1000 * watch['max_gap_s']:.0f}"),
        ("bystander closed", "yes" if watch["closed"] else "no"),
    ]
    for name, value in rows:
        print(f"| {name} | {value} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--inputs", type=int, default=100_000)
    parser.add_argument("--sessions", type=int, default=4)
    parser.add_argument("--rate", type=float, default=200.0, help="inputs a second at most")
    parser.add_argument("--pool", type=int, default=4000, help="inputs drawn by hypothesis")
    parser.add_argument("--seed", type=int, default=1)
    uvloop.run(fuzz(parser.parse_args()))


if __name__ == "__main__":
    main()
