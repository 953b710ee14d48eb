"""Run configurations over seeds in a pool of worker processes, one torch thread each.

A worker computes in one precision for its whole life (``precision.compute_dtype`` is decided once per
process), so the configurations are run in one pool per precision they ask for, one pool after the other;
within a pool the seeds of every configuration share the workers. Progress goes to ``progress`` (one line
per seed done).
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed

import msgspec
import torch

from ..evaluate import run_model
from ..kernels import KernelsChoice
from ..linears import chosen_linears
from ..loading import weights_file
from ..precision import PRECISIONS, compute_dtype
from ..runtime import Generator
from ..upsample import Upsample
from .drift import Drift, run_drift
from .metrics import seed_metrics
from .options import AUTO, RunOptions, Script


class SeedScores(msgspec.Struct, frozen=True, kw_only=True):
    """One configuration's numbers on one seed."""

    seed: int
    metrics: dict[str, float | None]
    drift: Drift | None
    precision: str  # the format the worker computed in ("bf16" or "fp32")
    linears: str = "float"  # what the blocks' matrix products computed in there ("float" or "int8")
    kernels: str = "torch"  # what the attention and MLP ran on there ("torch" or "onednn")
    seconds: float  # the seed's wall time in its worker
    order: tuple[str, ...] = ()  # the held actions in the order this seed held them (unknown: not recorded)


def run_configurations(
    configs: Sequence[RunOptions],
    seeds: Sequence[int],
    script: Script,
    jobs: int,
    progress: Callable[[str], None],
    labels: Sequence[str] | None = None,
) -> list[list[SeedScores]]:
    """Per configuration, its scores on every seed (in the order of ``seeds``)."""
    labels = labels or [f"configuration {i + 1}" for i in range(len(configs))]
    results: dict[tuple[int, int], SeedScores] = {}
    total, started = len(configs) * len(seeds), time.monotonic()
    for precision in dict.fromkeys(c.precision for c in configs):
        tasks = [(i, seed) for seed in seeds for i, c in enumerate(configs) if c.precision == precision]
        pool = ProcessPoolExecutor(
            max_workers=max(1, min(jobs, len(tasks))),
            mp_context=multiprocessing.get_context("spawn"),  # a fresh torch per worker: no forked threads
            initializer=_start_worker,
            initargs=(precision,),
        )
        try:
            futures: dict[Future[SeedScores], tuple[int, int]] = {
                pool.submit(score_seed, configs[i], seed, script): (i, seed) for i, seed in tasks
            }
            for future in as_completed(futures):
                i, seed = futures[future]
                results[i, seed] = scores = future.result()
                done = len(results)
                left = (time.monotonic() - started) / done * (total - done)
                progress(
                    f"{labels[i]} seed {seed}: {scores.seconds:.1f} s ({done}/{total} done, about "
                    f"{_duration(left)} left)"
                )
        finally:  # a failed seed (or ^C) leaves no queued seeds running
            pool.shutdown(cancel_futures=True)
    return [[results[i, seed] for seed in seeds] for i in range(len(configs))]


def score_seed(options: RunOptions, seed: int, script: Script) -> SeedScores:
    """One seed of the scripted evaluation and the drift probe under ``options`` (in this process)."""
    t0 = time.perf_counter()
    gen = _generator(options.dit, options.codec, options.upsample, options.kernels)
    result = run_model(
        gen,
        seed,
        options.cache,
        options.steps,
        cache_noise=options.cache_noise,
        linears=options.linears,
        commit_pass=options.commit_pass,
        actions=script.actions,
        side_turns=script.side_turns,
        order=script.order,
    )
    drift = run_drift(gen, seed, options, script.drift_chunks) if script.drift_chunks else None
    precision = next(name for name, dtype in PRECISIONS.items() if dtype == compute_dtype())
    return SeedScores(
        seed=seed,
        metrics=seed_metrics(result, drift),
        drift=drift,
        precision=precision,
        linears=chosen_linears(options.linears),
        kernels=gen.kernels,
        seconds=time.perf_counter() - t0,
        order=tuple(result.order),
    )


@functools.cache
def _generator(dit: str, codec: str, upsample: Upsample, kernels: KernelsChoice) -> Generator:
    """The worker's model from these weights, loaded by its first seed that asks for them."""
    return Generator.load(weights_file("dit", dit), weights_file("codec", codec), upsample, kernels)


def _start_worker(precision: str) -> None:
    if precision != AUTO:
        os.environ["ONSTAGE_PRECISION"] = precision  # read once, at this process's first chunk
    torch.set_num_threads(1)


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"
