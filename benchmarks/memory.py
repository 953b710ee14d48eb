"""A server's memory as sessions come and go: does a session that ended free what it held?

    .venv/bin/python benchmarks/memory.py                       # 6 rounds of 4 sessions, 3 s each
    .venv/bin/python benchmarks/memory.py --rounds 10 --per-round 2 --seconds 5
    .venv/bin/python benchmarks/memory.py --arena-max 2         # the server under MALLOC_ARENA_MAX=2

A real ``onstage serve`` (benchmarks/served.py) with a short resume grace. Each round opens
``--per-round`` sessions at once, streams them ``--seconds``, closes them, and waits until the server
reports no session left (each one's grace passed and it ended). Then the server's resident memory (VmRSS
of /proc/PID/status) is read. The first round pays for what is loaded once (the worker threads' first
pass through the model, allocator arenas); growth is measured from it to the last round.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import time
import urllib.request
from pathlib import Path

from served import served, session_url

from server.client import SessionClient

SERVER_CONFIG = """
[server.limits]
admission = "ceiling"  # admission is not what is measured here
max_sessions = {per_round}
resume_grace_s = 0.3
"""


def server_pid() -> int:
    """The one child of this process: the server that ``served`` started."""
    children = Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").read_text().split()
    if len(children) != 1:
        raise RuntimeError(f"expected one child process (the server), found {children}")
    return int(children[0])


def rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"^VmRSS:\s+(\d+) kB$", status, re.M)
    assert match is not None
    return int(match[1]) / 1024


def threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def sessions_left(base: str) -> int:
    with urllib.request.urlopen(f"{base}/metrics", timeout=5) as response:
        text = response.read().decode()
    match = re.search(r"^onstage_sessions (\d+)$", text, re.M)
    assert match is not None
    return int(match[1])


async def one_session(url: str, seed: int, seconds: float) -> None:
    async with SessionClient(url) as client:
        started = await client.start(seed=seed)
        chunks = int(seconds * started["fps"] / started["chunk_frames"])
        await client.wait_frame(lambda f: f.header["chunk"] >= chunks, timeout=seconds * 5 + 30)


async def until_no_sessions(base: str, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while await asyncio.to_thread(sessions_left, base):
        if time.monotonic() > end:
            raise RuntimeError("sessions did not end after their grace")
        await asyncio.sleep(0.1)


async def main(args: argparse.Namespace) -> None:
    if args.arena_max:
        os.environ["MALLOC_ARENA_MAX"] = str(args.arena_max)  # the server inherits it
    config = SERVER_CONFIG.format(per_round=args.per_round)
    rows = []
    async with contextlib.AsyncExitStack() as stack:
        base = await stack.enter_async_context(served(config))
        url = session_url(base)
        pid = server_pid()
        idle = rss_mib(pid)
        for r in range(args.rounds):
            seeds = range(r * args.per_round, (r + 1) * args.per_round)
            await asyncio.gather(*(one_session(url, s, args.seconds) for s in seeds))
            await until_no_sessions(base)
            rows.append(((r + 1) * args.per_round, rss_mib(pid), threads(pid)))
    first_n, first, _ = rows[0]
    last_n, last, _ = rows[-1]
    per_session = (last - first) / (last_n - first_n) if last_n > first_n else 0.0
    arena = f", MALLOC_ARENA_MAX={args.arena_max}" if args.arena_max else ""
    print(
        f"## Server memory, {args.rounds} rounds of {args.per_round} sessions ({args.seconds:g} s each{arena})\n"
    )
    print(f"Idle server before the first session: {idle:.0f} MiB\n")
    print("| round | sessions ended | RSS MiB | threads |")
    print("|---|---|---|---|")
    for i, (n, rss, nthreads) in enumerate(rows, 1):
        print(f"| {i} | {n} | {rss:.0f} | {nthreads} |")
    print(
        f"\nFirst round {first:.0f} MiB, last {last:.0f} MiB: {per_session:+.2f} MiB per session "
        f"after the first round ({last_n - first_n} sessions)."
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--per-round", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=3.0, help="how long each session streams")
    parser.add_argument("--arena-max", type=int, help="run the server under MALLOC_ARENA_MAX=N")
    asyncio.run(main(parser.parse_args()))
