"""How many sessions at once this machine keeps in real time: N sessions against a real ``onstage serve``,
N = 1, 2, ... until one of them falls below real time.

    .venv/bin/python benchmarks/capacity.py --mix gestures                   # N = 1, 2, ... to the first failure
    .venv/bin/python benchmarks/capacity.py --mix talking --sizes 4 5 6      # these N only, each of them
    .venv/bin/python benchmarks/capacity.py --admission served --sizes 1 2 3 4   # where admission stops
    .venv/bin/python benchmarks/capacity.py --splice --sizes 4 6    # clients that ask for splices, as the page
    .venv/bin/python benchmarks/capacity.py --mix gestures --server-toml 'batching = "off"' \
        --candidate-server-toml '' --candidate-server-toml 'backend_options = {steps = "1"}'

One server (``benchmarks/served.py``, its own process) per configuration, all started up front; for each
N, each configuration in turn gets N sessions, started one after another at random moments (users do not
arrive in step with the media clock), left ``--settle`` seconds, measured for ``--seconds``, then closed:
a change in the machine's speed (it is shared) falls on every configuration alike. Without ``--sizes``,
a configuration stops after its first N that fails, the run after every one has.

Mixes:
- ``gestures``: each client sends a gesture every 2.5-3.5 s (past the reflexes' 2 s cooldown) and streams
  no audio;
- ``talking``: each client's microphone streams in real time (20 ms frames of room noise) and asks a
  spoken question (Piper speech) every few seconds once the last answer has been heard out; the server
  transcribes it, its Director asks a local chat-completions endpoint (``tests/support/llm_server.py``,
  in this process, answering at once with a spoken reply) and the character answers with its voice.

Judged per session over the measured window, as the issue's goal puts it: on time (the server's own count
of chunks ready for their send, from ``/metrics``), the share of 1 s windows with at least fps - 0.5
frames at the client (23.5 at 24 fps), and reaction (input sent, or speech started, to the first frame
reflecting it) p50 / p99. A session is real-time with >= 99.9 % on time and >= 99.5 % of windows full.
Also, from ``/metrics`` at the end of each window: how busy the server measures its generator threads,
and the share one more session would take the busiest to (what admission compares with
``generator_busy_max``), and the same of the machine's cores (what it compares with ``machine_busy_max``).
Under each round's sessions: the server's CPU over the window by kind of thread, in cores (where a
session's cost goes: the generator lanes, transcription, the voice, the listeners, the event loop).
By default admission is lifted (``admission = "ceiling"``: up to ``max_sessions`` whatever the figures),
so that every N is tried; ``--admission served`` keeps the served defaults, to see where
admission stops (the rounds then wait out its measuring window between them, so that a round's sessions
are not judged by the last round's work). An N of which admission refused a session is shown as refused.
The clients run in this process on the same two cores: their work counts against the server's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import uvloop
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout first, for tests.support

from reaction import window_counts
from served import served, session_url
from stolen import Stolen
from voice_to_voice import QUESTIONS, Microphone, answer

from server.client import SessionClient
from server.demo_audio import speech
from streaming_model.busy import WINDOW_S
from tests.support.llm_server import LLMServer

GESTURES = ("wave", "thumbs_up", "point", "raise_hand", "nod")
LIFTED = 'admission = "ceiling"'
"""Admission lifted: the figures still measured, nothing refused by them."""
ON_TIME, WINDOWS = 0.999, 0.995
"""A session is real-time with at least this share of chunks on time and of full 1 s windows."""


@dataclass
class Session:
    """One client and what it measured."""

    index: int
    client: SessionClient
    session_id: str = ""
    reactions: list[float] = field(default_factory=list)
    inputs: int = 0
    answered: int = 0  # talking: answers heard out
    counters: dict[str, tuple[float, float]] = field(default_factory=dict)  # window start, end

    def on_time(self) -> float:
        (sent0, sent1), (ok0, ok1) = self.counters["chunks_sent"], self.counters["chunks_on_time"]
        return (ok1 - ok0) / max(1.0, sent1 - sent0)


def scrape(base: str) -> dict[str, dict[str, float]]:
    """``/metrics`` as {sample name: {session id, thread kind or "": value}} (blocking: call in a
    thread)."""
    with urllib.request.urlopen(f"{base}/metrics", timeout=10) as response:
        text = response.read().decode()
    out: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            label = sample.labels.get("session") or sample.labels.get("kind", "")
            out.setdefault(sample.name, {})[label] = sample.value
    return out


async def gestures(s: Session, rng: random.Random, stop: asyncio.Event) -> None:
    """A gesture every 2.5-3.5 s; the reaction to each."""
    client = s.client
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), rng.uniform(2.5, 3.5))
        if stop.is_set():
            return
        ref = f"g{s.inputs}"
        since = len(client.received.messages)
        sent = await client.send({"type": "input.gesture", "gesture": rng.choice(GESTURES), "ref": ref})
        s.inputs += 1
        with contextlib.suppress(TimeoutError):
            accepted = await client.wait_for(
                lambda m, ref=ref: m.get("type") == "input.accepted" and m.get("ref") == ref, 5, since
            )
            frame = await client.wait_frame(
                lambda f, e=accepted["event_id"]: e in f.header.get("reflects", ()), timeout=5
            )
            s.reactions.append(frame.t - sent)


async def talking(s: Session, rng: random.Random, stop: asyncio.Event, questions: list[np.ndarray]) -> None:
    """Room noise, and a question every few seconds once the last answer has been heard out; the reaction
    to each question's start (its ``input.speech_started``)."""
    client = s.client
    mic = Microphone(client, seed=s.index)
    streaming = asyncio.create_task(mic.run())
    try:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), rng.uniform(1.0, 3.0))
            if stop.is_set():
                return
            question = rng.choice(questions)
            start = mic.sent + mic.queued.size  # the question's first sample
            since = len(client.received.messages)
            await mic.say(question)
            s.inputs += 1
            began = mic.time_of(start)
            with contextlib.suppress(TimeoutError):
                heard = await client.wait_for(
                    lambda m, ms=start / 16.0: (
                        m.get("type") == "input.speech_started" and m["audio_ms"] >= ms - 100
                    ),
                    5,
                    since,
                )
                frame = client.received.first_reflecting(heard["event_id"]) or await client.wait_frame(
                    lambda f, e=heard["event_id"]: e in f.header.get("reflects", ()), timeout=5
                )
                s.reactions.append(frame.t - began)
            with contextlib.suppress(TimeoutError):
                await client.wait_for(
                    lambda m: m.get("type") == "character.speech" and m.get("state") == "ended", 20, since
                )
                s.answered += 1
    finally:
        streaming.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await streaming


@dataclass
class Round:
    """One N: its sessions and the server's figures at the end of the window."""

    n: int
    sessions: list[Session]
    windows: list[float]
    busy: float
    busy_next: float
    machine: float
    machine_next: float
    cores: dict[str, float] = field(default_factory=dict)
    """The server's CPU over the measured window by kind of thread, in cores."""
    refused: str = ""
    """Admission's refusal of one of the N (then nothing was measured)."""
    stolen: float | None = None
    """Cores' time the hypervisor took over the measured window (``benchmarks/stolen.py``)."""

    def real_time(self) -> list[bool]:
        if self.refused:
            return [False] * self.n
        return [
            s.on_time() >= ON_TIME and w >= WINDOWS for s, w in zip(self.sessions, self.windows, strict=True)
        ]


async def one_round(base: str, n: int, args: argparse.Namespace, questions: list[np.ndarray]) -> Round:
    rng = random.Random(args.seed * 1000 + n)
    url = session_url(base)
    stop = asyncio.Event()
    sessions: list[Session] = []
    drivers: list[asyncio.Task[None]] = []
    async with contextlib.AsyncExitStack() as stack:
        for i in range(n):
            await asyncio.sleep(rng.uniform(0.2, 1.0))  # a random phase against the others' chunks
            client = await stack.enter_async_context(SessionClient(url))
            s = Session(i, client)
            director = "llm" if args.mix == "talking" else "script"
            try:
                started = await client.start(seed=args.seed + i, director=director, splice=args.splice)
                s.session_id = started["session_id"]
            except RuntimeError as refused:  # admission judged one more session would not keep real time
                stop.set()
                await asyncio.gather(*drivers, return_exceptions=True)
                await stack.aclose()
                await until_gone(base, args)
                nan = float("nan")
                return Round(n, sessions, [], nan, nan, nan, nan, refused=f"session {i + 1}: {refused}")
            sessions.append(s)
            driver = talking(s, rng, stop, questions) if args.mix == "talking" else gestures(s, rng, stop)
            drivers.append(asyncio.create_task(driver))
        await asyncio.sleep(args.settle)
        before = await asyncio.to_thread(scrape, base)
        t0 = time.monotonic()
        stolen = Stolen()
        marks = [(len(s.reactions), len(s.client.received.video)) for s in sessions]
        await asyncio.sleep(args.seconds)
        after = await asyncio.to_thread(scrape, base)
        t1 = time.monotonic()
        steal = stolen.cores()
        stop.set()
        await asyncio.gather(*drivers, return_exceptions=True)
    windows = []
    for s, (reacted, seen) in zip(sessions, marks, strict=True):
        s.reactions = s.reactions[reacted:]
        for name in ("chunks_sent", "chunks_on_time"):
            key = f"onstage_session_{name}_total"
            s.counters[name] = (before[key].get(s.session_id, 0.0), after[key].get(s.session_id, 0.0))
        times = np.array([f.t for f in s.client.received.video[seen:] if t0 <= f.t <= t1])
        counts = window_counts(times, args.fps) if times.size > 1 else np.zeros(1)
        windows.append(float(np.mean(counts >= args.fps - 0.5)) if counts.size else 0.0)
    await until_gone(base, args)

    def gauge(name: str) -> float:
        return after.get(f"onstage_{name}", {}).get("", float("nan"))

    ran = "onstage_thread_cpu_seconds_total"
    cores = {kind: (s - before[ran].get(kind, 0.0)) / (t1 - t0) for kind, s in after.get(ran, {}).items()}
    return Round(
        n,
        sessions,
        windows,
        gauge("generator_busy"),
        gauge("generator_busy_next"),
        gauge("machine_busy"),
        gauge("machine_busy_next"),
        cores,
        stolen=steal,
    )


async def until_gone(base: str, args: argparse.Namespace, timeout: float = 30.0) -> None:
    """Wait until the server holds no session (the last round's are past their resume grace), and with
    admission as served, until their work is out of its measuring window."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not (await asyncio.to_thread(scrape, base))["onstage_sessions"].get("", 0.0):
            if args.admission == "served":
                await asyncio.sleep(WINDOW_S + 1.0)
            return
        await asyncio.sleep(0.2)
    raise RuntimeError("the last round's sessions did not end")


def ms(values: list[float], q: float) -> str:
    return f"{1000 * float(np.percentile(values, q)):.0f}" if values else "-"


def row(r: Round) -> str:
    if r.refused:
        return f"| {r.n} | refused | | | | | | | | | |"
    ok = r.real_time()
    on_time = [s.on_time() for s in r.sessions]
    reactions = [x for s in r.sessions for x in s.reactions]
    worst_p99 = max((float(np.percentile(s.reactions, 99)) for s in r.sessions if s.reactions), default=0.0)
    inputs = sum(s.inputs for s in r.sessions)
    answered = f" / {sum(s.answered for s in r.sessions)}" if any(s.answered for s in r.sessions) else ""
    return (
        f"| {r.n} | {sum(ok)}/{r.n} | {100 * min(on_time):.2f} % | {100 * min(r.windows):.1f} % "
        f"| {ms(reactions, 50)} / {ms(reactions, 99)} | {1000 * worst_p99:.0f} | {len(reactions)}{answered} / {inputs} "
        f"| {100 * r.busy:.0f} % | {100 * r.busy_next:.0f} % | {100 * r.machine:.0f} % "
        f"| {100 * r.machine_next:.0f} % |"
    )


def details(r: Round) -> str:
    if r.refused:
        return f"N = {r.n}: admission refused {r.refused}"
    parts = [
        f"s{s.index}: {100 * s.on_time():.1f} % on time, {100 * w:.0f} % windows, "
        f"reaction {ms(s.reactions, 50)}/{ms(s.reactions, 99)} ms"
        for s, w in zip(r.sessions, r.windows, strict=True)
    ]
    busiest = sorted(r.cores.items(), key=lambda kv: -kv[1])
    cores = ", ".join(f"{kind} {c:.2f}" for kind, c in busiest if c >= 0.005)
    return (
        f"N = {r.n}: "
        + "; ".join(parts)
        + f". Server CPU in cores, {sum(r.cores.values()):.2f} in all: {cores}"
        + ("" if r.stolen is None else f"; the hypervisor took {r.stolen:.2f} cores")
    )


HEADER = (
    "| N | real-time | on time (worst) | 1 s windows >= 23.5 fps (worst) | reaction p50 / p99 ms "
    "| worst session's p99 ms | reactions / inputs | generator busy | the busiest with one more "
    "| machine busy | the machine with one more |\n"
    "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
)


async def main(args: argparse.Namespace) -> None:
    """Every N in turn, each configuration in turn within it; a table per configuration."""
    questions = [speech(q, sampling_noise=False) for q in QUESTIONS] if args.mix == "talking" else []
    configs = [args.server_toml, *args.candidate_server_toml]
    names = [" ".join(c.split()) or "defaults" for c in configs]
    rounds: list[list[Round]] = [[] for _ in configs]
    async with LLMServer(default=answer) as llm, contextlib.AsyncExitStack() as stack:
        # Only talking sessions have a Director: gesture sessions follow the scripted plan.
        director = f'base_url = "{llm.base_url}"\napi_key = "bench"\nmodel = "bench"'
        bases = []
        for server_toml in configs:
            config = f"""
[server]
{server_toml}

[server.limits]
max_sessions = 64
{LIFTED if args.admission == "lifted" else ""}
resume_grace_s = 0.2

[director]
{director if args.mix == "talking" else ""}
"""
            bases.append(await stack.enter_async_context(served(config)))
        load = os.getloadavg()[0]
        for n in args.sizes or range(1, 65):
            for i, base in enumerate(bases):
                if not args.sizes and rounds[i] and not all(rounds[i][-1].real_time()):
                    continue  # this configuration failed at a smaller N
                r = await one_round(base, n, args, questions)
                rounds[i].append(r)
                print(f"{names[i]}: {row(r)}", file=sys.stderr, flush=True)
            if not args.sizes and all(rs and not all(rs[-1].real_time()) for rs in rounds):
                break
    for name, rs in zip(names, rounds, strict=True):
        print(
            f"## {args.mix}{', spliced' if args.splice else ''}: N sessions at once (server: {name}; "
            f"{args.settle:g} s settling, "
            f"{args.seconds:g} s measured per N; seed {args.seed}; configurations in turn per N; load "
            f"{load:.2f} at the start, {os.getloadavg()[0]:.2f} at the end)\n"
        )
        print(HEADER)
        print("\n".join(row(r) for r in rs))
        print("\nPer session:\n")
        print("\n".join(f"- {details(r)}" for r in rs))
        print()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mix", choices=("gestures", "talking"), default="gestures")
    parser.add_argument(
        "--sizes", type=int, nargs="+", help="the N to try (default 1, 2, ... to the first failure)"
    )
    parser.add_argument("--seconds", type=float, default=60.0, help="measured seconds per N")
    parser.add_argument("--settle", type=float, default=5.0, help="seconds after the last session started")
    parser.add_argument("--server-toml", default="", help="lines of the server's [server] table")
    parser.add_argument(
        "--candidate-server-toml",
        action="append",
        default=[],
        help="another server's [server] lines (repeatable): every N runs on each server in turn",
    )
    parser.add_argument(
        "--admission",
        choices=("lifted", "served"),
        default="lifted",
        help="lift admission as far as it goes (default), or keep the served defaults",
    )
    parser.add_argument(
        "--splice",
        action="store_true",
        help="the clients ask for reactions spliced into the chunk playing (session.start splice), as the "
        "browser page does: each spliced reaction makes one more chunk, alone",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--fps", type=float, default=24.0)
    uvloop.run(main(parser.parse_args()))
