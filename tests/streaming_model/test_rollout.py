"""Rollouts in training: the context the model learns to continue from is what it made itself, one level
of its own predictions per depth, each level continuing from the one before."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from streaming_model.dit import DiT, with_scene
from streaming_model.loading import load_dit
from streaming_model.train.dit_batches import SEQ, Batcher
from streaming_model.train.dit_train import known_conditions, loss_on, own_context, parse_args
from tests.support.shard_arrays import night_falls


@pytest.fixture(scope="module")
def model_and_batch() -> tuple[DiT, dict[str, torch.Tensor], torch.Tensor]:
    model = with_scene(load_dit()[0]).eval()
    batcher = Batcher(model.cfg, night_falls(), np.zeros((8, 16, 16, 16), np.float32))
    return model, batcher.batch(torch.Generator().manual_seed(0), 2), batcher.mask


def _own(
    model: DiT, bt: dict[str, torch.Tensor], mask: torch.Tensor, gen: torch.Generator, depth: int
) -> torch.Tensor:
    rope = model.rope_tables(bt["pos"])
    return own_context(model, bt, known_conditions(model, bt), rope, mask, gen, depth)


def test_each_level_of_a_rollout_continues_from_the_level_before(
    model_and_batch: tuple[DiT, dict[str, torch.Tensor], torch.Tensor],
) -> None:
    model, bt, mask = model_and_batch
    two = _own(model, bt, mask, torch.Generator().manual_seed(5), depth=2)
    gen = torch.Generator().manual_seed(5)
    one = _own(model, bt, mask, gen, depth=1)
    # The second level is the first level's rollout of a batch whose context is the first level's output.
    again = _own(model, {**bt, "z": torch.cat([one, bt["z"][:, SEQ:]], dim=1)}, mask, gen, depth=1)
    assert torch.equal(two, again)
    assert two.shape == bt["z"][:, :SEQ].shape
    assert torch.equal(two[:, 0], bt["z"][:, 0])  # the reference stays the reference
    assert not torch.equal(two[:, 1:], one[:, 1:]) and not torch.equal(one[:, 1:], bt["z"][:, 1:SEQ])


def test_a_deep_rollout_trains_and_a_depth_below_one_is_refused(
    model_and_batch: tuple[DiT, dict[str, torch.Tensor], torch.Tensor],
) -> None:
    model, bt, mask = model_and_batch
    loss = loss_on(model, bt, mask, torch.Generator().manual_seed(1), depth=3)
    assert torch.isfinite(loss) and loss.requires_grad  # the gradient flows through the targets' pass only
    with pytest.raises(ValueError, match="depth must be >= 1"):
        loss_on(model, bt, mask, torch.Generator().manual_seed(1), depth=0)


def test_the_command_line_refuses_a_depth_below_one_before_training_starts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.argv", ["dit_train", "--rollout-depth", "3"])
    assert parse_args().rollout_depth == 3
    monkeypatch.setattr("sys.argv", ["dit_train", "--rollout-depth", "0"])
    with pytest.raises(SystemExit):
        parse_args()
    assert "--rollout-depth must be >= 1, not 0" in capsys.readouterr().err
