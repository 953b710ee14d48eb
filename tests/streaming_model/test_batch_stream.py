"""Training batches built ahead in worker processes are the batches this process would build: each worker
draws its own seeded stream, handed out round-robin, so a run is repeatable with the same workers."""

from __future__ import annotations

from itertools import islice

import numpy as np
import torch

from streaming_model.dit import with_scene
from streaming_model.loading import load_dit
from streaming_model.train.batch_stream import STRIDE, batch_stream, batches
from streaming_model.train.dit_batches import Batcher
from tests.support.shard_arrays import night_falls


def _batcher() -> Batcher:
    data = night_falls()
    data["latents"] = np.random.default_rng(0).normal(size=data["latents"].shape).astype(np.float16)
    cfg = with_scene(load_dit()[0]).cfg
    return Batcher(cfg, data, np.zeros((8, 16, 16, 16), np.float32), change_prob=0.5)


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_two_workers_hand_out_their_own_seeded_streams_in_turn() -> None:
    batcher = _batcher()
    loaded = list(islice(batch_stream(batcher, 5, 3, workers=2), 4))
    first, second = batches(batcher, 5, 3), batches(batcher, 5 + STRIDE, 3)
    expected = [next(first), next(second), next(first), next(second)]
    assert all(_same(a, b) for a, b in zip(loaded, expected, strict=True))
    assert not _same(loaded[0], loaded[1])  # the workers' streams differ


def test_without_workers_the_batches_are_the_first_workers_stream() -> None:
    batcher = _batcher()
    here = list(islice(batch_stream(batcher, 9, 2, workers=0), 3))
    one_worker = list(islice(batch_stream(batcher, 9, 2, workers=1), 3))
    assert all(_same(a, b) for a, b in zip(here, one_worker, strict=True))
