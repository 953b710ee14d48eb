"""What a session costs on a generator worker on Ray against one in-process, and how many sessions one
node keeps in real time, in one run.

    .venv/bin/python benchmarks/cluster.py                 # all four parts (about nine minutes)
    .venv/bin/python benchmarks/cluster.py --chunks 120 --rounds 3 --seconds 60 --most 6
    .venv/bin/python benchmarks/cluster.py --parts 1 --chunks 240      # part 1 alone

Part 1, chunk time: the tiny model's chunks generated, committed and encoded to JPEG by an in-process
``ModelWorker`` and by a ``RemoteWorker`` on a local Ray slot actor (``ray.init`` in this process, one
slot), the same conditions, in alternating blocks so that a busy machine weighs on both alike; and the
round trip of an empty actor call (the per-call overhead); and a third worker, a second session of the same
slot (they take turns), whose every call also carries a session's minds as a front end notes them for a
take-over (``agent.handover``: the default plan's minds, ticked and noted before each chunk, the noting
timed with the chunk). Part 2, reaction at the client: two real
servers (``onstage serve`` and ``onstage serve --ray local``, each in its own process), one session at a
time on each in turn, gestures sent over the WebSocket: from sending one to the first frame whose
``reflects`` names it; and each session's on-time share (its last ``metrics``). Ratios are Ray over
in-process. Part 3, sessions per node: one server with ``--ray local`` (one Ray node: this machine) and
``--most`` slots; 1, 2, ... sessions started at once, each streaming with the default plan; over
``--seconds`` seconds after a warm-up of ``WARM_UP_S`` (the sessions' starts: prefill, the greeting's
synthesis), each session's chunks ready by their send time over chunks sent (the server's own counts,
from ``/metrics``). The node keeps k sessions in real time when every one of the k has at least 99.9 % of its
chunks on time (also given: at least 99 %); it stops after the first k under 99 % for some session. Part
4, batching in a slot: one slot serving ``--batch`` sessions (``ray.init`` in this process), each round
their chunks asked for at once (the slot batches those that queue while it is busy) against one after
another (each alone),
in alternating blocks: the time of the round and per session. Ray is shut down at the end of each part.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time

import numpy as np
import ray
from reaction import last_frame_of
from served import served, session_url, sessions_counters

from agent.director_config import DirectorConfig
from agent.handover import Handover
from agent.minds import Minds
from agent.reflex import ReflexConfig
from agent.script import load_script
from events.bus import EventBus
from server.client import SessionClient
from server.cluster.remote import RaySlots
from server.cluster.settings import ClusterSettings
from server.media import encode_frames
from server.sessions import DEFAULT_PLAN
from streaming_model.condition import ChunkCondition
from streaming_model.manifest import build_manifest
from streaming_model.tiny import TinyBackend
from streaming_model.worker import Cancel, GeneratorWorker, ModelWorker

LOCAL = """
[server.limits]
max_sessions = 1
resume_grace_s = 0.2
"""
RAY = (
    LOCAL
    + """
[server.ray]
address = "local"
local_slots = 1
"""
)
GAP_CHUNKS = 15  # between gestures: past the reflexes' 2 s cooldown on the tiny model's clock
WARM_UP_S = 5.0
"""Part 3 counts chunks after this (sessions starting together are late together; that is not a node's
steady load)."""
REAL_TIME = (0.999, 0.99)
"""On-time shares every session must keep for a node to count as keeping them in real time."""


def capacity_config(most: int) -> str:
    """A front end with ``most`` slots on a Ray of its own (one node) and room for as many sessions."""
    return (
        f'[server.limits]\nadmission = "ceiling"\nmax_sessions = {most}\nresume_grace_s = 0.2\n'
        f'[server.ray]\naddress = "local"\nlocal_slots = {most}\n'
    )


def p50_p95(values: list[float]) -> tuple[float, float]:
    p50, p95 = np.percentile(np.asarray(values), [50, 95])
    return float(p50), float(p95)


async def chunk_times(worker: GeneratorWorker, n: int, minds: Noted | None = None) -> list[float]:
    """Seconds each of ``n`` chunks took from the call to its JPEG images in hand (with ``minds``: from
    their decision, noted and kept with the chunk)."""
    conds = [ChunkCondition(action=("idle", "wave", "nod")[i // 8 % 3]) for i in range(n)]
    times = []
    for cond in conds:
        t = time.perf_counter()
        if minds is not None:
            await minds.note(worker)
        assert await worker.produce(cond, Cancel(), encode_frames) is not None
        times.append(time.perf_counter() - t)
    return times


class Noted:
    """A session's minds (the default plan, reflexes), ticked once a chunk and noted for the worker."""

    def __init__(self) -> None:
        manifest = build_manifest()
        script = load_script(DEFAULT_PLAN, manifest)
        self.minds = Minds.build(
            bus=EventBus(),
            session="bench",
            mind="script",
            manifest=manifest,
            config=DirectorConfig(),
            script=script,
            reflexes=ReflexConfig(),
        )
        self.minds.start()
        self.handover = Handover(self.minds)
        self.k = 0
        self.sizes: list[int] = []

    async def note(self, worker: GeneratorWorker) -> None:
        self.minds.tick(self.k)
        self.k += 1
        notes = await self.handover.notes()
        self.sizes.append(sum(len(b) for b in notes.values()))
        worker.keep(notes)


async def part_chunks(chunks: int, block: int) -> list[str]:
    local = ModelWorker(TinyBackend.load(), identity=0, seed=1)
    slots = await asyncio.to_thread(
        RaySlots.connect, ClusterSettings(address="local", local_slots=1, sessions_per_slot=2), "tiny", {}
    )
    try:
        remote = await slots.open(identity=0, seed=1, name="bench")
        noting = await slots.open(identity=0, seed=1, name="bench-noted")
        minds = Noted()
        await chunk_times(local, 4)  # warm them: a session's first chunks run slower
        await chunk_times(remote, 4)
        await chunk_times(noting, 4, minds)
        got: dict[str, list[float]] = {"in-process": [], "Ray actor": [], "noted": []}
        for _ in range(chunks // block):
            got["in-process"] += await chunk_times(local, block)
            got["Ray actor"] += await chunk_times(remote, block)
            got["noted"] += await chunk_times(noting, block, minds)
        slot, _ = slots.slots[0]
        trips: list[float] = []
        for _ in range(200):
            t = time.perf_counter()
            await slot.generating.remote()
            trips.append(time.perf_counter() - t)
        await remote.close()
        await noting.close()
        await minds.minds.stop()
    finally:
        await local.close()
        await slots.close()
    (l50, l95), (r50, r95) = p50_p95(got["in-process"]), p50_p95(got["Ray actor"])
    n50, n95 = p50_p95(got["noted"])
    t50, t95 = p50_p95(trips)
    # The remote session's chunk j has index 4 + j (after the warm-up): those at a multiple of
    # snapshot_every began with a snapshot saved (its export on the actor's other thread).
    every = slots.snapshot_every
    saving = [t for j, t in enumerate(got["Ray actor"]) if (4 + j) % every == 0]
    other = [t for j, t in enumerate(got["Ray actor"]) if (4 + j) % every != 0]
    (s50, s95), (o50, o95) = p50_p95(saving), p50_p95(other)
    return [
        f"Chunk time (generate, commit, decode, JPEG; {chunks} chunks each, blocks of {block}), ms:",
        "",
        "| worker | p50 | p95 |",
        "|---|---|---|",
        f"| in-process | {1e3 * l50:.1f} | {1e3 * l95:.1f} |",
        f"| Ray actor (same machine) | {1e3 * r50:.1f} | {1e3 * r95:.1f} |",
        f"| ratio Ray / in-process | {r50 / l50:.2f} | {r95 / l95:.2f} |",
        f"| Ray actor: chunks that saved a snapshot (1 in {every}) | {1e3 * s50:.1f} | {1e3 * s95:.1f} |",
        f"| Ray actor: the other chunks | {1e3 * o50:.1f} | {1e3 * o95:.1f} |",
        f"| empty actor call (per-call overhead) | {1e3 * t50:.2f} | {1e3 * t95:.2f} |",
        f"| Ray actor, each call with the minds' notes (median {np.median(minds.sizes) / 1024:.1f} KiB)"
        f" | {1e3 * n50:.1f} | {1e3 * n95:.1f} |",
        f"| ratio noted / Ray actor | {n50 / r50:.2f} | {n95 / r95:.2f} |",
    ]


async def gestures(url: str, seed: int, n: int) -> tuple[list[float], float]:
    """Reaction seconds of ``n`` gestures in one session, and its last reported on-time share."""
    async with SessionClient(url) as client:
        await client.start(seed=seed)
        reactions = []
        for i in range(n):
            await last_frame_of(client, 8 + i * GAP_CHUNKS)
            since = len(client.received.messages)
            sent = await client.send({"type": "input.gesture", "gesture": "wave", "ref": f"g{i}"})
            accepted = await client.wait_for(
                lambda m, i=i: m.get("type") == "input.accepted" and m.get("ref") == f"g{i}", 5, since
            )
            frame = await client.wait_frame(lambda f, e=accepted["event_id"]: e in f.header["reflects"], 10)
            reactions.append(frame.t - sent)
        await client.wait_type("metrics", timeout=5)
        on_time = client.received.of_type("metrics")[-1]["on_time"]
    await asyncio.sleep(0.5)  # past the server's resume grace: the session is gone before the next
    return reactions, on_time


async def part_reaction(rounds: int, per_session: int) -> list[str]:
    got: dict[str, tuple[list[float], list[float]]] = {"in-process": ([], []), "Ray actor": ([], [])}
    async with contextlib.AsyncExitStack() as stack:
        urls = {
            "in-process": session_url(await stack.enter_async_context(served(LOCAL))),
            "Ray actor": session_url(await stack.enter_async_context(served(RAY))),
        }
        for r in range(rounds):
            for name, url in urls.items():
                reactions, on_time = await gestures(url, 40 + r, per_session)
                got[name][0].extend(reactions)
                got[name][1].append(on_time)
    rows = {name: (p50_p95(reactions), min(on_times)) for name, (reactions, on_times) in got.items()}
    (l50, l95), _ = rows["in-process"]
    (r50, r95), _ = rows["Ray actor"]
    return [
        f"Gesture to first reflecting frame at the client ({rounds * per_session} gestures each), ms:",
        "",
        "| generator | p50 | p95 | on-time share (worst session) |",
        "|---|---|---|---|",
        *(f"| {name} | {1e3 * a:.0f} | {1e3 * b:.0f} | {ot:.3f} |" for name, ((a, b), ot) in rows.items()),
        f"| ratio Ray / in-process | {r50 / l50:.2f} | {r95 / l95:.2f} | |",
    ]


async def streamed(base: str, k: int, seconds: float) -> list[dict[str, float]]:
    """``k`` sessions started at once on the server at ``base``: each one's ``/metrics`` figures over
    ``seconds`` after ``WARM_UP_S`` (counters as differences, the rest as at the end)."""
    async with contextlib.AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(SessionClient(session_url(base))) for _ in range(k)]
        await asyncio.gather(*(client.start(seed=60 + i, timeout=120) for i, client in enumerate(clients)))
        await asyncio.sleep(WARM_UP_S)
        before = await asyncio.to_thread(sessions_counters, base)
        await asyncio.sleep(seconds)
        after = await asyncio.to_thread(sessions_counters, base)
    await asyncio.sleep(0.5)  # past the server's resume grace: the sessions are gone before the next round
    assert len(before) == len(after) == k, f"{len(after)} sessions live of {k}"
    return [
        {name: value - before[sid][name] if name.endswith("_total") else value for name, value in now.items()}
        for sid, now in after.items()
    ]


async def part_batching(sessions: int, rounds: int, block: int) -> list[str]:
    slots = await asyncio.to_thread(
        RaySlots.connect,
        ClusterSettings(address="local", local_slots=1, sessions_per_slot=sessions),
        "tiny",
        {},
    )
    try:
        workers = [await slots.open(identity=0, seed=s, name=f"batch-{s}") for s in range(sessions)]
        conds = [ChunkCondition(action=("idle", "wave", "nod")[i // 8 % 3]) for i in range(rounds)]

        async def round_of(cond: ChunkCondition, together: bool) -> float:
            t = time.perf_counter()
            if together:
                await asyncio.gather(*(w.produce(cond, Cancel(), encode_frames) for w in workers))
            else:
                for w in workers:
                    await w.produce(cond, Cancel(), encode_frames)
            return time.perf_counter() - t

        for cond in conds[:4]:  # warm up: a session's first chunks run slower
            await round_of(cond, True)
        got: dict[bool, list[float]] = {True: [], False: []}
        for i, cond in enumerate(conds):
            together = (i // block) % 2 == 0
            got[together].append(await round_of(cond, together))
        slot, _ = slots.slots[0]
        batches = await slot.batches.remote()
        for w in workers:
            await w.close()
    finally:
        await slots.close()
    (t50, t95), (a50, a95) = p50_p95(got[True]), p50_p95(got[False])
    return [
        f"Batching in a slot ({sessions} sessions on one slot, {rounds} rounds in blocks of {block};"
        f" batch sizes seen: {sorted(set(batches))}), ms per round (per session):",
        "",
        "| chunks | p50 | p95 |",
        "|---|---|---|",
        f"| one after another | {1e3 * a50:.1f} ({1e3 * a50 / sessions:.1f}) | {1e3 * a95:.1f} |",
        f"| at once (batched as they queue) | {1e3 * t50:.1f} ({1e3 * t50 / sessions:.1f}) | {1e3 * t95:.1f} |",
        f"| ratio at once / one after another | {t50 / a50:.2f} | {t95 / a95:.2f} |",
    ]


async def part_capacity(most: int, seconds: float) -> list[str]:
    rows: list[str] = []
    kept = dict.fromkeys(REAL_TIME, 0)  # threshold -> the most sessions kept, counting up from 1
    async with served(capacity_config(most)) as base:
        for k in range(1, most + 1):
            figures = await streamed(base, k, seconds)
            sent = [f["chunks_sent_total"] for f in figures]
            on_time = [f["chunks_on_time_total"] for f in figures]
            worst = min(o / max(1.0, n) for o, n in zip(on_time, sent, strict=True))
            p99 = max(f.get("chunk_seconds_q0.99", float("nan")) for f in figures)
            rows.append(
                f"| {k} | {worst:.4f} | {sum(on_time) / sum(sent):.4f} | {sum(sent):.0f} | {1e3 * p99:.0f} |"
            )
            for threshold in REAL_TIME:
                if worst >= threshold and kept[threshold] == k - 1:
                    kept[threshold] = k
            if worst < min(REAL_TIME):
                break
    return [
        f"Sessions at once on one node (this machine, {most} slots; {seconds:g} s each after {WARM_UP_S:g} s),"
        " chunks on time:",
        "",
        "| sessions | worst session | all sessions | chunks sent | chunk p99 (worst session), ms |",
        "|---|---|---|---|---|",
        *rows,
        "",
        *(
            f"Sessions one node keeps in real time (each >= {100 * t:g} % on time): {n}"
            for t, n in kept.items()
        ),
    ]


async def main(args: argparse.Namespace) -> None:
    parts = {int(p) for p in args.parts.split(",")}
    lines: list[str] = []
    if 1 in parts:
        lines += await part_chunks(args.chunks, args.block)
        assert not ray.is_initialized()
    if 2 in parts:
        lines += ["", *await part_reaction(args.rounds, args.gestures)]
    if 3 in parts:
        lines += ["", *await part_capacity(args.most, args.seconds)]
    if 4 in parts:
        lines += ["", *await part_batching(args.batch, args.chunks, args.block)]
    print("\n".join(lines))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--parts", default="1,2,3,4", help="which parts to run (e.g. 1 or 1,3)")
    parser.add_argument("--batch", type=int, default=2, help="sessions on the one slot of part 4")
    parser.add_argument("--chunks", type=int, default=80, help="chunks per worker in part 1")
    parser.add_argument("--block", type=int, default=10, help="chunks in a row on one worker")
    parser.add_argument("--rounds", type=int, default=2, help="sessions per server in part 2")
    parser.add_argument("--gestures", type=int, default=6, help="gestures per session")
    parser.add_argument("--most", type=int, default=6, help="most sessions at once on the node (part 3)")
    parser.add_argument("--seconds", type=float, default=30.0, help="seconds each session streams (part 3)")
    asyncio.run(main(parser.parse_args()))
