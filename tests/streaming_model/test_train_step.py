"""One training step: the optimiser moves the model, and the EMA follows it by the step's decay."""

from __future__ import annotations

import copy

import numpy as np
import torch

from streaming_model.dit import with_scene
from streaming_model.loading import load_dit
from streaming_model.train.dit_batches import Batcher
from streaming_model.train.dit_train import train_step
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
