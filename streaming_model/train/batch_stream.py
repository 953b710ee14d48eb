"""Training batches as an endless stream, built in this process or ahead of the step in worker processes.

On a GPU the transformer's step at batch 48 is short enough that building its batch on one core (31 ms,
a third of a step on an H200) left the device idle; workers build the next batches while it computes.
Each stream is deterministic: worker ``k`` draws from its own generator (``seed + STRIDE * k``), and the
loader hands batches out round-robin, so a run with the same seed and workers sees the same batches.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

STRIDE = 7919
"""Seed distance between workers' generators (a prime, so nearby runs' seeds do not meet)."""

Batch = dict[str, torch.Tensor]


class BatchSource(Protocol):
    """What builds one batch from a generator (``dit_batches.Batcher``)."""

    def batch(self, gen: torch.Generator, b: int) -> Batch: ...


def batches(source: BatchSource, seed: int, size: int) -> Iterator[Batch]:
    """Batches of ``size`` sequences, forever, from one generator seeded ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    while True:
        yield source.batch(gen, size)


class _Stream(IterableDataset[Batch]):
    def __init__(self, source: BatchSource, seed: int, size: int) -> None:
        self.source, self.seed, self.size = source, seed, size

    def __iter__(self) -> Iterator[Batch]:
        info = get_worker_info()
        return batches(self.source, self.seed + STRIDE * (info.id if info else 0), self.size)


def batch_stream(
    source: BatchSource, seed: int, size: int, workers: int, pin: bool = False
) -> Iterator[Batch]:
    """Batches from ``workers`` processes (forked, so the shards in memory are shared, not copied), each a
    few batches ahead; with 0 workers, built here when asked for, from the stream of worker 0."""
    if workers == 0:
        return batches(source, seed, size)
    loader = DataLoader(
        _Stream(source, seed, size),
        batch_size=None,
        num_workers=workers,
        pin_memory=pin,
        prefetch_factor=4,
        persistent_workers=True,
        multiprocessing_context="fork",
    )
    return iter(loader)
