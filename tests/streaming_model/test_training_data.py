"""Training inputs: token masks find the character and its face; noise levels favour the sampler's."""

from __future__ import annotations

import numpy as np
import torch

from streaming_model.train.dit_data import face_mask, token_mask
from streaming_model.train.dit_train import sample_levels
from streaming_model.world.episodes import reference_chunk


def test_face_tokens_are_character_tokens_around_the_head() -> None:
    chunk = reference_chunk(np.array([2]))[0]  # character centred at x = 64, head around y = 46
    char, face = token_mask(chunk), face_mask(chunk)
    assert face.any() and (char | ~face).all()  # the face is part of the character
    rows = np.flatnonzero(face) // 8
    cols = np.flatnonzero(face) % 8
    assert set(rows) <= {2, 3} and set(cols) <= {3, 4}  # 16-pixel tokens around (64, 46)
    assert 0.1 < char.mean() < 0.4


def test_noise_levels_concentrate_on_the_two_step_samplers_levels() -> None:
    t = sample_levels(torch.Generator().manual_seed(0), (20_000,))
    assert 0.3 < (t == 1.0).float().mean() < 0.4
    assert 0.2 < (t == 0.5).float().mean() < 0.3
    assert (t > 0.5).float().mean() > 0.5  # weighted toward high noise
    assert t.min() >= 0.02 and t.max() <= 1.0
