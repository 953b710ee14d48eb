"""A slim decoder taught by a teacher learns what the teacher's decoder draws of the same latents, on the
encoder's latents and on the transformer's own; the command line refuses a teacher without a slim
decoder."""

from __future__ import annotations

import argparse
import copy
import sys

import pytest
import torch

from streaming_model.codec import to_pixels
from streaming_model.loading import load_codec
from streaming_model.train.codec_args import parse_args
from streaming_model.train.codec_data import ChunkPool
from streaming_model.train.codec_train import _from_bank, _step, _Training, character_weight, drawn_weight
from streaming_model.train.model_latents import ModelLatents


def _run(teacher_too: bool) -> tuple[_Training, argparse.Namespace]:
    model = load_codec()
    model.encoder.requires_grad_(False)
    opt = torch.optim.AdamW(model.decoder.parameters(), lr=1e-3, weight_decay=0.0)
    run = _Training(model, None, opt, model.cfg.voice_taps)
    if teacher_too:
        run.teacher = copy.deepcopy(model).requires_grad_(False)
    args = argparse.Namespace(
        device=torch.device("cpu"), batch=4, face_weight=8.0, decoder_only=True, lr=1e-3, turn_weight=1.0
    )
    return run, args


@pytest.fixture(scope="module")
def pool() -> ChunkPool:
    return ChunkPool(load_codec().cfg.voice_taps, scene=False, alternate=False, first_seed=7, fetches=1)


def _largest_gradient(run: _Training) -> float:
    return max(float(p.grad.abs().max()) for p in run.model.decoder.parameters() if p.grad is not None)


def test_a_decoder_taught_by_its_own_twin_has_nothing_to_learn(pool: ChunkPool) -> None:
    run, args = _run(teacher_too=True)
    loss, _, _ = _step(run, args, pool, torch.Generator().manual_seed(0))
    # What is left is the latent's small penalty: every pixel the student draws is the teacher's.
    assert loss < 1e-3
    twin = _largest_gradient(run)
    # Taught by the world's frames instead, the same decoder has something to learn.
    run, args = _run(teacher_too=False)
    loss, _, _ = _step(run, args, pool, torch.Generator().manual_seed(0))
    assert loss > 1e-3
    assert twin < 1e-3 * _largest_gradient(run)


def test_half_of_a_taught_batch_is_the_transformers_latents_in_the_encoders_units() -> None:
    run, _ = _run(teacher_too=True)
    taps = run.taps
    bank = ModelLatents(
        torch.randn(5, 16, 16, 16), torch.rand(5, taps - 1 + 4), torch.zeros(5, dtype=torch.bool)
    )
    run.bank = bank
    z, voice = torch.zeros(4, 16, 16, 16), torch.zeros(4, taps - 1 + 4)
    mixed_z, mixed_voice = _from_bank(run, z, voice, torch.Generator().manual_seed(0))
    assert torch.equal(mixed_z[:2], z[:2]) and torch.equal(mixed_voice[:2], voice[:2])
    for zi, vi in zip(mixed_z[2:], mixed_voice[2:], strict=True):
        match = [
            i
            for i in range(5)
            if torch.allclose(zi * run.model.scale, bank.latent[i]) and torch.equal(vi, bank.voice[i])
        ]
        assert len(match) == 1  # a chunk of the bank, latent and voice together


@pytest.mark.parametrize(("weight", "share"), [(1.0, 0.2), (4.0, 0.5)])
def test_turning_chunks_of_the_transformer_are_drawn_as_often_as_their_weight_says(
    weight: float, share: float
) -> None:
    run, _ = _run(teacher_too=True)
    n, taps = 10, run.taps
    # Chunk i's latent is all i, so a drawn chunk names itself; chunks 0 and 1 were made under a turn.
    latent = torch.arange(n, dtype=torch.float32)[:, None, None, None].expand(n, 16, 4, 4)
    run.bank = ModelLatents(latent * run.model.scale, torch.zeros(n, taps - 1 + 4), torch.arange(n) < 2)
    z, voice = torch.zeros(8000, 16, 4, 4), torch.zeros(8000, taps - 1 + 4)
    mixed, _ = _from_bank(run, z, voice, torch.Generator().manual_seed(0), weight)
    drawn = mixed[4000:, 0, 0, 0].round()
    # Two turning chunks of ten at weight w: 2w / (2w + 8) of the draws (0.2 at 1, 0.5 at 4).
    assert abs(float((drawn < 2).float().mean()) - share) < 0.03
    assert set(drawn.tolist()) == set(range(n))


def test_a_teachers_frames_weigh_up_the_character_and_its_face_as_the_worlds_do(pool: ChunkPool) -> None:
    frames = pool.parts.target[:6]
    truth = character_weight(pool.parts.char[:6], pool.parts.face[:6], 8.0)
    found = drawn_weight(to_pixels(frames), 8.0)
    # Of today's world, the frames themselves show where the character and its face are.
    assert torch.equal(found, truth)
    assert float(found.max()) > 5.0 and float(found.min()) == 1.0


@pytest.mark.parametrize(
    ("argv", "complaint"),
    [
        (["--teacher"], "--teacher teaches a slim decoder"),
        (["--slim", "--model-seeds", "4"], "--model-seeds needs --teacher"),
        (["--slim", "--teacher", "--model-seeds", "-1"], "--model-seeds must be >= 0"),
        (["--slim", "--teacher", "--turn-weight", "4"], "--turn-weight weighs the transformer's chunks"),
        (["--slim", "--teacher", "--model-seeds", "4", "--turn-weight", "0.5"], "--turn-weight must be >= 1"),
    ],
)
def test_the_command_line_refuses_a_lesson_that_cannot_be_taught(
    argv: list[str], complaint: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["codec_train", *argv])
    with pytest.raises(SystemExit) as stop:
        parse_args()
    assert stop.value.code == 2 and complaint in capsys.readouterr().err
