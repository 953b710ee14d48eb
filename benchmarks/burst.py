"""A burst of transcription and synthesis through the shared encoders beside a streaming session: the
session's on-time share with and without the burst, in one run.

    .venv/bin/python benchmarks/burst.py                      # 3 rounds of two 15 s windows
    .venv/bin/python benchmarks/burst.py --rounds 4 --window-s 20 --jobs 12
    .venv/bin/python benchmarks/burst.py --ray               # encoders and generator on a local Ray

One server in this process (the encoders are the factory's: one Whisper and one Piper for every session, each
on its own niced thread, ``events.priority``) and one session streaming to a WebSocket client. Windows
alternate, quiet then burst, so that whatever else the machine does weighs on both alike. In a burst window
``--jobs`` transcriptions of real speech (the five speakers of tests/data/sounds) and ``--jobs`` syntheses of
a reply are queued at once, as when that many sessions end their turns together, and queued again as soon as
they are done, until the window ends. With ``--ray`` the encoders are the shared Ray actors
(``server.cluster.encoders``: Whisper, YAMNet and Piper for every front end; one here, as the Ray started
here declares no ``onstage_encoders``) and the session's generator a Ray slot actor, on that Ray, with one
slot. Per kind of window: the session's chunks on time (the conductor's own
count), chunk generation time p50 / p99, and the largest gap between frames at the client; and how many
encoder jobs the burst got through.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # for tests.support

from events.hearing import Hearing
from events.transcriber import Transcriber, TranscriberConfig
from server.app import OnstageServer
from server.client import SessionClient
from server.core.conductor import Conductor
from server.sessions import SessionFactory
from server.voice import Voice
from streaming_model.pool import WorkerPool
from streaming_model.tiny import TinyBackend
from tests.support.sound_set import SPEECH, clip

REPLY = "Of course. I saw the key by the shed this morning, under the old flower pot near the door."


class Window:
    """What one window of one kind added up to."""

    def __init__(self) -> None:
        self.sent = 0
        self.on_time = 0
        self.chunk_ms: list[float] = []
        self.gaps_ms: list[float] = []
        self.jobs = 0

    def add(self, other: Window) -> None:
        self.sent += other.sent
        self.on_time += other.on_time
        self.chunk_ms += other.chunk_ms
        self.gaps_ms += other.gaps_ms
        self.jobs += other.jobs


async def burst(transcriber: Transcriber, voice: Voice, jobs: int, until: float) -> int:
    """Keep ``jobs`` transcriptions and ``jobs`` syntheses queued on the shared encoders until ``until``;
    how many finished."""
    speech = [clip(name) for name in SPEECH]
    done = 0

    async def transcribe(i: int) -> None:
        nonlocal done
        while time.monotonic() < until:
            await asyncio.wrap_future(transcriber.submit(speech[i % len(speech)]))
            done += 1

    async def synthesize() -> None:
        # As a session's speech player does: the first sentence at the video's priority, the rest below.
        nonlocal done
        first, *rest = voice.sentences(REPLY)
        while time.monotonic() < until:
            await voice.synthesize_async(first, first=True)
            for sentence in rest:
                await voice.synthesize_async(sentence)
            done += 1

    await asyncio.gather(*(transcribe(i) for i in range(jobs)), *(synthesize() for _ in range(jobs)))
    return done


async def window(
    core: Conductor, client: SessionClient, seconds: float, load: Transcriber | None, voice: Voice, jobs: int
) -> Window:
    """One window: the session's counts over it, with a burst when ``load`` is given."""
    out = Window()
    sent, on_time, times = core.chunks_sent, core.chunks_on_time, len(client.received.video)
    until = time.monotonic() + seconds
    jobs_done = asyncio.create_task(burst(load, voice, jobs, until)) if load is not None else None
    await asyncio.sleep(max(0.0, until - time.monotonic()))
    out.sent, out.on_time = core.chunks_sent - sent, core.chunks_on_time - on_time
    # The window's chunks are the newest in the schedule's record (it keeps 200, more than a window makes).
    out.chunk_ms = [t * 1000.0 for t in list(core.chunk_times)[-out.sent :]] if out.sent else []
    arrivals = [f.t for f in client.received.video[times:]]
    out.gaps_ms = [(b - a) * 1000.0 for a, b in itertools.pairwise(arrivals)]
    if jobs_done is not None:
        out.jobs = await jobs_done  # the jobs queued last finish after the window (not counted in it)
    return out


def p(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def row(name: str, w: Window) -> str:
    share = 100.0 * w.on_time / w.sent if w.sent else float("nan")
    return (
        f"| {name} | {w.sent} | {share:.1f} % | {statistics.median(w.chunk_ms):.0f} / {p(w.chunk_ms, 99):.0f} | "
        f"{max(w.gaps_ms, default=float('nan')):.0f} | {w.jobs} |"
    )


async def factory_of(ray: bool) -> tuple[SessionFactory, WorkerPool | None]:
    """Sessions with the encoders and generator in this process, or (``ray``) on a Ray started here; the
    slots to close at the end."""
    if not ray:
        return await asyncio.to_thread(SessionFactory, TinyBackend.load(), hearing=Hearing()), None
    from server.cluster.remote import RaySlots
    from server.cluster.remote_encoders import shared_voice_and_hearing
    from server.cluster.settings import ClusterSettings

    slots = await asyncio.to_thread(
        RaySlots.connect, ClusterSettings(address="local", local_slots=1), "tiny", {}
    )
    voice, hearing = await asyncio.to_thread(shared_voice_and_hearing, TranscriberConfig(), True)
    return await asyncio.to_thread(SessionFactory, None, voice, hearing, workers=slots), slots


async def main(args: argparse.Namespace) -> None:
    print("loading the models...", file=sys.stderr)
    factory, slots = await factory_of(args.ray)
    hearing = factory.hearing
    transcriber = hearing.transcriber
    assert transcriber is not None
    server = OnstageServer(factory)
    await server.start("127.0.0.1", 0)
    quiet, loud = Window(), Window()
    try:
        async with SessionClient(f"ws://127.0.0.1:{server.port}/v1/session") as client:
            started = await client.start(director="none", seed=1, timeout=120)
            core = server.sessions[started["session_id"]].conductor
            await asyncio.sleep(args.warmup_s)
            for r in range(args.rounds):
                quiet.add(await window(core, client, args.window_s, None, factory.voice, args.jobs))
                loud.add(await window(core, client, args.window_s, transcriber, factory.voice, args.jobs))
                print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    finally:
        await server.close()
        if slots is not None:
            await slots.close()
    print("| window | chunks | on time | chunk ms p50 / p99 | largest frame gap ms | encoder jobs done |")
    print("|---|---:|---:|---:|---:|---:|")
    print(row("quiet", quiet))
    print(row(f"burst ({args.jobs} transcriptions + {args.jobs} syntheses queued)", loud))
    ratio = statistics.median(loud.chunk_ms) / statistics.median(quiet.chunk_ms)
    print(f"\nchunk time p50, burst / quiet: {ratio:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--window-s", type=float, default=15.0)
    parser.add_argument("--jobs", type=int, default=8, help="transcriptions and syntheses queued at once")
    parser.add_argument("--warmup-s", type=float, default=5.0)
    parser.add_argument("--ray", action="store_true", help="encoders and generator as Ray actors")
    asyncio.run(main(parser.parse_args()))
