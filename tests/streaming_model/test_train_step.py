"""One training step: the optimiser moves the model, and the EMA follows it by the step's decay."""

from __future__ import annotations

import copy

import numpy as np
import torch

from streaming_model.dit import with_scene
from streaming_model.loading import load_dit
from streaming_model.train.dit_batches import Batcher
from streaming_model.train.dit_train import WARMUP_STEPS, learning_rate, train_step
from tests.support.shard_arrays import night_falls


def test_a_step_moves_the_model_and_the_ema_follows_it_by_the_decay() -> None:
    model = with_scene(load_dit()[0])
    ema = copy.deepcopy(model).requires_grad_(False)
    with torch.no_grad():  # an EMA that has drifted from the model, so that following it shows
        for p in ema.parameters():
            p.add_(0.01)
    before_model = [p.detach().clone() for p in model.parameters()]
    before_ema = [p.detach().clone() for p in ema.parameters()]
    batcher = Batcher(model.cfg, night_falls(), np.zeros((8, 16, 16, 16), np.float32))
    batch = batcher.batch(torch.Generator().manual_seed(0), 1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss = train_step(model, ema, opt, batch, batcher.mask, step=0)
    assert loss.requires_grad is False and torch.isfinite(loss)
    moved = [not torch.equal(a, p) for a, p in zip(before_model, model.parameters(), strict=True)]
    assert sum(moved) > len(moved) // 2
    decay = 0.1  # at step 0: (1 + 0) / (10 + 0)
    for old, new, m in zip(before_ema, ema.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(new, decay * old + (1 - decay) * m.detach())


def test_a_run_warms_up_only_where_its_optimizer_starts_afresh() -> None:
    assert learning_rate(3e-4, None, 0, 0.0) == 3e-4 / WARMUP_STEPS
    assert learning_rate(3e-4, None, WARMUP_STEPS, 0.5) == 3e-4
    assert learning_rate(3e-4, None, None, 0.0) == 3e-4  # a checkpoint's moments resumed: no warm-up again
    assert abs(learning_rate(3e-4, 1e-4, None, 0.5) - 2e-4) < 1e-12  # annealed by the share of the run gone
    assert abs(learning_rate(3e-4, 1e-4, 0, 1.0) - 1e-4) < 1e-12
