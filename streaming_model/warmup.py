"""A backend's costs, measured at warm-up on throwaway sessions: what its manifest declares."""

from __future__ import annotations

import functools
import itertools
import threading
import time
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import numpy as np
import torch

from .backend import BackendSession, Batching, BatchingBackend, Costs, percentile_ms
from .condition import ChunkCondition

WARMUP_ACTIONS = ("idle", "wave", "walk_right", "nod")
"""The chunks timed at warm-up (cycled): a mix of still and moving actions."""


P = ParamSpec("P")
R = TypeVar("R")


def on_one_thread(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` run on one intra-op thread of torch's, as lanes and session workers run chunks (timed on the
    machine's every core, the costs were not what a lane pays: and on a busy machine the threads waited
    for each other, a batch of one timed at 210 ms against 40); the caller's count restored after."""

    @functools.wraps(fn)
    def timed(*args: P.args, **kwargs: P.kwargs) -> R:
        before = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return fn(*args, **kwargs)
        finally:
            torch.set_num_threads(before)

    return timed


@on_one_thread
def measure_costs(session: BackendSession, chunks: int = 4, audio_frames: int = 4) -> Costs:
    """Generate, decode and commit ``chunks`` chunks (plus the first), then one interrupted chunk, and time
    them.

    The interrupt is set half a typical chunk into a generation; a generation that ends before it counts
    its whole remaining time (an upper bound). ``audio_frames``: the session's frames per chunk."""
    audio = (0.0,) * audio_frames
    generate_s: list[float] = []
    finish_s: list[float] = []
    commit_s: list[float] = []
    first_s = 0.0
    for i in range(chunks + 1):
        cond = ChunkCondition(action=WARMUP_ACTIONS[i % len(WARMUP_ACTIONS)], audio=audio)
        began = time.perf_counter()
        pending = session.generate(cond)
        denoised = time.perf_counter()
        assert pending is not None  # nothing cancels it
        session.decode(pending)
        decoded = time.perf_counter()
        session.commit(pending)
        done = time.perf_counter()
        if i == 0:
            first_s = done - began  # a fresh session's first pass runs longer than later ones
            continue
        generate_s.append(denoised - began)
        finish_s.append(decoded - denoised)
        commit_s.append(done - decoded)
    cancel = threading.Event()
    set_at: list[float] = []

    def interrupt() -> None:
        set_at.append(time.perf_counter())
        cancel.set()

    timer = threading.Timer(sorted(generate_s)[len(generate_s) // 2] / 2, interrupt)
    timer.start()
    session.generate(ChunkCondition(action="jump", audio=audio), cancel)
    returned = time.perf_counter()
    timer.cancel()
    timer.join()
    interrupt_s = returned - set_at[0] if set_at else 0.0
    return Costs(
        chunk_p50_ms=percentile_ms(generate_s, 50),
        chunk_p95_ms=percentile_ms(generate_s, 95),
        finish_p50_ms=percentile_ms(finish_s, 50),
        commit_p50_ms=percentile_ms(commit_s, 50),
        first_chunk_ms=round(1000.0 * first_s, 1),
        interrupt_ms=round(1000.0 * max(interrupt_s, 0.0), 1),
    )


@on_one_thread
def measure_batching(
    backend: BatchingBackend, max_batch: int, rounds: int = 3, audio_frames: int = 4
) -> tuple[Batching, tuple[float, ...]]:
    """Whether batches are exact on this machine, and a whole chunk's median time for 1..``max_batch``
    sessions at once (``Costs.batch_p50_ms``), from throwaway sessions: timed at 1, 2, 4, ... and
    ``max_batch`` sessions (``timed_sizes``), in between as the line between them (a batch's time grows
    about linearly with its sessions; the sizes between differ by less than their run-to-run spread, and
    timing each of 1..8 took ~7 s of every start on an AVX2 core).

    Exactness is checked, not assumed: ``max_batch`` sessions go through one batch and their twins (same
    seeds) one by one, with a voice, and every frame is compared. Number kernels may sum in
    another order at another batch size (int8 with one scale per batch would; bf16 on AVX512-BF16 did
    not), so the answer holds for this machine and this backend's options. Then ``rounds`` timed batches
    of each timed size, the sessions' first chunk already behind them, the sizes in turn (three by default:
    the median of three is not one stalled batch on a busy machine); a size never costs less than a smaller
    one."""
    conds = [
        ChunkCondition(
            action=WARMUP_ACTIONS[i % len(WARMUP_ACTIONS)],
            speaking=True,
            audio=tuple(0.2 + 0.6 * ((i + j) % 2) for j in range(audio_frames)),
        )
        for i in range(max_batch)
    ]
    sessions = [backend.open_session(identity=0, seed=i) for i in range(max_batch)]
    twins = [backend.open_session(identity=0, seed=i) for i in range(max_batch)]
    exact = True
    for _ in range(2):
        batched = _chunk_many(backend, sessions, conds)
        for twin, cond, frames in zip(twins, conds, batched, strict=True):
            pending = twin.generate(cond)
            assert pending is not None  # nothing cancels it
            exact = exact and np.array_equal(twin.decode(pending), frames)
            twin.commit(pending)
    for twin in twins:
        twin.close()
    sizes = timed_sizes(max_batch)
    times: list[list[float]] = [[] for _ in sizes]
    # Every size in turn, round after round: a slow spell of a busy machine falls on all sizes alike, not
    # on every round of one (all of a batch of one's rounds in a spell made it cost more than a batch of
    # two, and admission's tests judged on those costs).
    for _ in range(max(rounds, 1)):
        for i, size in enumerate(sizes):
            began = time.perf_counter()
            _chunk_many(backend, sessions[:size], conds[:size])
            times[i].append(time.perf_counter() - began)
    for session in sessions:
        session.close()
    # A batch does a smaller one's work and more: never cheaper than it, whatever the spells.
    p50 = list(itertools.accumulate((percentile_ms(t, 50) for t in times), max))
    every = np.interp(np.arange(1, max_batch + 1), sizes, p50)
    return ("exact" if exact else "approximate"), tuple(round(float(ms), 1) for ms in every)


def timed_sizes(max_batch: int) -> list[int]:
    """The batch sizes ``measure_batching`` times: the powers of two below ``max_batch``, and it."""
    return [2**k for k in range(max_batch.bit_length()) if 2**k < max_batch] + [max_batch]


def _chunk_many(
    backend: BatchingBackend, sessions: list[BackendSession], conds: list[ChunkCondition]
) -> list[np.ndarray]:
    pendings = backend.generate_many(sessions, conds, [None] * len(sessions))
    ready = [p for p in pendings if p is not None]
    assert len(ready) == len(sessions)  # nothing cancels them
    frames = backend.decode_many(sessions, ready)
    backend.commit_many(sessions, ready)
    return frames
