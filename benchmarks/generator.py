"""Benchmark the streaming generator: per-chunk time of today's path and of the faster candidates, as
ratios measured in one run, and cache maintenance, write-time vs naive.

    python benchmarks/generator.py                 # 300 chunks per path, 1 thread
    python benchmarks/generator.py --chunks 3600   # a 10-minute session (memory checked along the way);
                                                   # the naive path runs --naive-chunks (default 300)

Per chunk = generate (all denoise steps) + commit (the cache write pass) + decode to pixels, each timed.
``frames`` = generate + decode: when a chunk's frames are ready, its commit coming after them (the model
worker's order, ``streaming_model.producer``), and what a replacement of an unsent chunk costs.
Cache maintenance = time spent rotating/quantizing/assembling cached keys and values.

The paths, each its own session on the same script and seed:
- ``today``: --steps denoise steps on the fp32 model as loaded, float linears, the commit pass through
  the whole network (as before ``DiT.keys_values``; kept here only as the reference to measure against);
- ``short commit``: the same with the commit pass stopping at the last block's keys and values;
- ``held``: and, where the machine computes in bf16, the Linear weights held in bf16
  (``precision.held_for_compute``): a session as it opens now, frames bit-identical to ``today``'s;
- ``int8``: and the blocks' Linear layers in dynamic int8 (``linears=int8``);
- ``1 step``, ``1 step int8``: one denoise step, with float or int8 linears (both held);
- ``1 step fused``, ``1 step int8 fused``: the same with each chunk written to the cache in the pass that
  generates the next (``commit_pass="fused"``, ``streaming_model.passes``: its commit's time is in
  ``gen``); every other path commits in a pass of its own (``apart``);
- ``1 step fused slim``, ``1 step int8 fused slim``: the same on the slim codec, whose decoder has no
  residual block per frame (``codec_train --slim --teacher``; ``--slim-codec PATH`` for another); the
  paths above decode with the full codec (``--codec``), as today's did; every path so far computes the
  decoder's output layer as trained (``upsample="transposed"``);
- ``1 step int8 fused slim parity``: a session as served where the machine computes in fp32
  (``linears=auto``): the decoder's output layer in parity form (``streaming_model.upsample``);
- ``1 step fused slim parity``: the same with float linears;
- ``1 step fused slim parity onednn``, ``1 step int8 fused slim parity onednn``: both on ``kernels=onednn``
  (``streaming_model.kernels``; every path above runs torch's kernels): the former is a session as served
  where the machine computes in bf16 (the line after the table names the served path);
- ``naive``: today's chunk on the naive cache path (the upkeep comparison).
The paths take turns chunk by chunk, so a change in the machine's load falls on all of them alike and
the ratios to ``today`` compare like with like.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

import numpy as np
import torch

# The checkout's own packages (not an editable install's) and tests.support.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from stolen import Stolen  # the benchmarks' own module (this script's folder is first on sys.path)

from streaming_model.condition import ChunkCondition
from streaming_model.kernels import chosen_kernels
from streaming_model.kv_cache import CacheMode
from streaming_model.linears import Linears, chosen_linears
from streaming_model.loading import CODEC_PATH, DIT_PATH, SLIM_CODEC_PATH
from streaming_model.manifest import ACTION_NAMES, build_manifest
from streaming_model.passes import CommitPass
from streaming_model.precision import compute_dtype
from streaming_model.runtime import Generator, Session
from streaming_model.world.episodes import reference_chunk
from tests.support.commit_pass import commit_whole

BUDGET_MS = 1000.0 * build_manifest().chunk_s  # the tiny model's chunk: 166.7 ms
WARM = 5
"""Chunks per path left out of the figures: they pay one-time allocation costs."""


def rss_mb() -> float:
    """Resident memory of this process in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return float("nan")


def script(n: int) -> list[ChunkCondition]:
    """A cycling sequence of actions, 6 chunks each, talking half of the time."""
    rng = np.random.default_rng(0)
    out = []
    for i in range(n):
        action = ACTION_NAMES[(i // 6) % len(ACTION_NAMES)]
        talking = (i // 12) % 2 == 0
        out.append(
            ChunkCondition(
                action=action,
                target=(0.5, -0.2),
                speaking=talking,
                audio=tuple(float(a) for a in rng.uniform(0, 1, 4)),
            )
        )
    return out


class Lane:
    """One path's session and what it measured, chunk by chunk."""

    def __init__(self, name: str, session: Session, chunks: int) -> None:
        self.name, self.session, self.chunks = name, session, chunks
        self.times: list[float] = []
        self.stages: list[tuple[float, float, float]] = []  # generate, commit, decode (ms)
        self.rss: list[float] = []

    def step(self, i: int, cond: ChunkCondition) -> None:
        """Generate, commit and decode chunk i, each timed."""
        t0 = time.perf_counter()
        pending = self.session.generate(cond)
        t1 = time.perf_counter()
        assert pending is not None
        self.session.commit(pending, decode=False)
        t2 = time.perf_counter()
        self.session.decode(pending)
        t3 = time.perf_counter()
        self.times.append(1000.0 * (t3 - t0))
        self.stages.append((1000.0 * (t1 - t0), 1000.0 * (t2 - t1), 1000.0 * (t3 - t2)))
        if i % 100 == 0:
            self.rss.append(rss_mb())

    def summary(self) -> dict[str, float]:
        """Median, p99, max, late share, stage medians, upkeep and memory (the first ``WARM`` chunks left
        out: they pay one-time allocation costs)."""
        warm, stages = self.times[WARM:], np.array(self.stages[WARM:])
        rss = [*self.rss, rss_mb()]
        return {
            "chunks": len(self.times),
            "median_ms": statistics.median(warm),
            "p99_ms": float(np.percentile(warm, 99)),
            "max_ms": max(warm),
            "late_share": float(np.mean(np.array(warm) > BUDGET_MS)),
            "generate_ms": float(np.median(stages[:, 0])),
            "commit_ms": float(np.median(stages[:, 1])),
            "decode_ms": float(np.median(stages[:, 2])),
            "frames_ms": float(np.median(stages[:, 0] + stages[:, 2])),
            "frames_p99_ms": float(np.percentile(stages[:, 0] + stages[:, 2], 99)),
            "maint_ms": 1000.0 * self.session.cache.maintenance_s / len(self.times),
            "rss_start_mb": rss[1] if len(rss) > 2 else rss[0],
            "rss_end_mb": rss[-1],
        }


def run(paths: list[Lane], conds: list[ChunkCondition]) -> None:
    """Step every path through conds, taking turns chunk by chunk (a path stops at its own length)."""
    for i, c in enumerate(conds):
        for path in paths:
            if i < path.chunks:
                path.step(i, c)


def interrupt_latency(session: Session, trials: int) -> dict[str, float]:
    """Set the cancel flag at a random moment inside generate(); time until generate() returns."""
    rng = np.random.default_rng(1)
    cond = ChunkCondition(action="wave")
    t0 = time.perf_counter()
    for _ in range(5):
        warm = session.generate(cond)
        assert warm is not None
        session.commit(warm, decode=False)  # so that the next pass also commits it, where it fuses
    gen_s = (time.perf_counter() - t0) / 5
    lat = []
    for _ in range(trials):
        cancel = threading.Event()
        stamp: list[float] = []

        def interrupt(c: threading.Event = cancel, st: list[float] = stamp) -> None:
            st.append(time.perf_counter())
            c.set()

        timer = threading.Timer(rng.uniform(0.05, 0.9) * gen_s, interrupt)
        timer.start()
        out = session.generate(cond, cancel=cancel)
        done = time.perf_counter()
        timer.join()
        if out is None:
            lat.append(1000.0 * (done - stamp[0]))
        else:
            session.commit(out, decode=False)
    steps = len(session.levels)
    return {
        "step_ms": 1000.0 * gen_s / steps,
        "median_ms": statistics.median(lat),
        "max_ms": max(lat),
        "n": len(lat),
    }


def served_path() -> str:
    """The path a live session runs on this machine (``linears=auto``, ``kernels=auto``)."""
    linears = "int8 " if chosen_linears("auto") == "int8" else ""
    return f"1 step {linears}fused slim parity" + (" onednn" if chosen_kernels("auto") == "onednn" else "")


def main() -> None:
    """Run every path on the same script, in turns, and print a table with each path's ratio to today."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--chunks", type=int, default=300)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--naive-chunks", type=int, default=300)
    ap.add_argument("--dit", type=Path, default=DIT_PATH)
    ap.add_argument("--codec", type=Path, default=CODEC_PATH, help="the codec of the paths not named slim")
    ap.add_argument(
        "--slim-codec",
        type=Path,
        default=SLIM_CODEC_PATH,
        help="the slim paths' codec (default: the shipped slim one, codec_train --slim --teacher)",
    )
    args = ap.parse_args()
    if min(args.chunks, args.naive_chunks) <= WARM:
        ap.error(f"--chunks and --naive-chunks must be more than the {WARM} warm-up chunks left out")
    torch.set_num_threads(args.threads)
    # The decoders as trained; the served one's output layer in parity form (``streaming_model.upsample``).
    gen = Generator.load(args.dit, args.codec, upsample="transposed", kernels="torch")
    slim = Generator.load(args.dit, args.slim_codec, upsample="transposed", kernels="torch")
    served = Generator.load(args.dit, args.slim_codec, kernels="torch")
    onednn = Generator.load(args.dit, args.slim_codec, kernels="onednn")

    def session(
        steps: int, linears: Linears = "float", commit_pass: CommitPass = "apart", on: Generator = gen
    ) -> Session:
        return on.open_session(identity=1, seed=0, steps=steps, linears=linears, commit_pass=commit_pass)

    def as_loaded(steps: int, mode: CacheMode = "write_time", whole: bool = True) -> Session:
        """A session on the fp32 model as loaded (weights cast by autocast on use), as before."""
        reference = reference_chunk(np.array([1]))[0]
        s = Session(gen, reference, 0, steps, mode, 8, 0.0, gen.dit, commit_pass="apart")
        return commit_whole(s, gen.dit) if whole else s

    n = args.chunks
    paths = [
        Lane("today", as_loaded(args.steps), n),
        Lane("short commit", as_loaded(args.steps, whole=False), n),
        Lane("held", session(args.steps), n),
        Lane("int8", session(args.steps, "int8"), n),
        Lane("1 step", session(1), n),
        Lane("1 step int8", session(1, "int8"), n),
        Lane("1 step fused", session(1, commit_pass="fused"), n),
        Lane("1 step int8 fused", session(1, "int8", "fused"), n),
        Lane("1 step fused slim", session(1, commit_pass="fused", on=slim), n),
        Lane("1 step int8 fused slim", session(1, "int8", "fused", on=slim), n),
        Lane("1 step int8 fused slim parity", session(1, "int8", "fused", on=served), n),
        Lane("1 step fused slim parity", session(1, commit_pass="fused", on=served), n),
        Lane("1 step fused slim parity onednn", session(1, commit_pass="fused", on=onednn), n),
        Lane("1 step int8 fused slim parity onednn", session(1, "int8", "fused", on=onednn), n),
        Lane("naive", as_loaded(args.steps, mode="naive"), min(n, args.naive_chunks)),
    ]
    t0 = time.perf_counter()
    stolen = Stolen()
    run(paths, script(n))
    wall = time.perf_counter() - t0
    steal = stolen.line("the paths' chunks")
    results = {p.name: p.summary() for p in paths}
    today = results["today"]
    print(
        f"{args.steps} denoise steps (today), {args.threads} thread(s), computing in {compute_dtype()}, "
        f"budget {BUDGET_MS:.1f} ms per chunk, paths in turns, {wall:.0f} s"
    )
    print(
        f"{'path':<36} {'chunks':>6} {'median ms':>10} {'p99 ms':>8} {'max ms':>8} {'late %':>7} "
        f"{'x median':>9} {'x p99':>6} {'gen':>6} {'commit':>7} {'decode':>7} {'frames':>7} "
        f"{'frames p99':>10} {'maint ms':>9} "
        f"{'RSS MiB':>15}"
    )
    for name, r in results.items():
        print(
            f"{name:<36} {r['chunks']:>6.0f} {r['median_ms']:>10.1f} {r['p99_ms']:>8.1f} {r['max_ms']:>8.1f} "
            f"{100 * r['late_share']:>7.2f} {r['median_ms'] / today['median_ms']:>9.3f} "
            f"{r['p99_ms'] / today['p99_ms']:>6.3f} {r['generate_ms']:>6.1f} {r['commit_ms']:>7.1f} "
            f"{r['decode_ms']:>7.1f} {r['frames_ms']:>7.1f} {r['frames_p99_ms']:>10.1f} {r['maint_ms']:>9.3f} "
            f"{r['rss_start_mb']:>7.0f}->{r['rss_end_mb']:<7.0f}"
        )
    print(f"served here: {served_path()}")
    print(steal)
    naive = results["naive"]
    print(f"maintenance naive / write-time: {naive['maint_ms'] / max(today['maint_ms'], 1e-9):.1f}x")
    lat = interrupt_latency(gen.open_session(identity=1, seed=0, steps=args.steps), 40)  # fused
    print(
        f"interrupt: {lat['n']} cancelled mid-chunk, cancel->return median {lat['median_ms']:.1f} ms, "
        f"max {lat['max_ms']:.1f} ms (one denoise step = {lat['step_ms']:.1f} ms)"
    )


if __name__ == "__main__":
    main()
