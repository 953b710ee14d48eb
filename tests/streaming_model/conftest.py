"""Small randomly initialised models: the runtime's mechanics (determinism, interrupt, rollback) do not
depend on training, and small models keep the tests fast on two cores."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from streaming_model.codec import Codec, CodecConfig
from streaming_model.condition import ChunkCodes
from streaming_model.dit import DiT, DiTConfig
from streaming_model.manifest import SCENE
from streaming_model.runtime import Generator
from streaming_model.world.episodes import Episode, random_codes, simulate

TINY_DIT = DiTConfig(width=64, depth=2, heads=2, rope_dims=(8, 12, 12), max_distance=12)
TINY_CODEC = CodecConfig(c1=8, c2=16, c3=16, mix=32, voice_taps=3)


def _randomize_zero_init(model: torch.nn.Module) -> None:
    # adaLN-Zero layers and the decoder's voice layers start at zero (outputs would ignore their
    # inputs): give them weights so outputs depend on inputs and the tests can see differences.
    gen = torch.Generator().manual_seed(1)
    for p in model.parameters():
        if not p.detach().abs().sum():
            p.data = torch.randn(p.shape, generator=gen) * 0.05


@pytest.fixture(scope="session")
def tiny_models() -> tuple[DiT, Codec]:
    """Tiny random models (fixed seed): a transformer and a codec."""
    torch.manual_seed(0)
    torch.set_num_threads(1)
    dit = DiT(TINY_DIT)
    _randomize_zero_init(dit)
    codec = Codec(TINY_CODEC)
    _randomize_zero_init(codec)
    return dit, codec


@pytest.fixture(scope="session")
def tiny_generator(tiny_models: tuple[DiT, Codec]) -> Generator:
    """A Generator with the tiny models, on this machine's kernels (``streaming_model.kernels``)."""
    return Generator(*tiny_models)


@pytest.fixture(scope="session")
def torch_kernels_generator(tiny_models: tuple[DiT, Codec]) -> Generator:
    """A Generator with the tiny models on torch's own kernels, as trained, whatever the machine."""
    return Generator(*tiny_models, kernels="torch")


@pytest.fixture(scope="session")
def night_rain() -> Episode:
    """One idle world at night in the rain, a door open and a ball there, with its scenery drawn alone."""
    codes = random_codes(np.random.default_rng(0), 1, 24, scene=True)
    scene = np.zeros_like(codes.scene)
    choices = {"light": "night", "weather": "rain", "door": "open", "prop": "ball"}
    for p, spec in enumerate(SCENE):
        scene[..., p] = spec.choices.index(choices.get(spec.name, spec.choices[0]))
    idle = ChunkCodes(**{**vars(codes), "action": np.zeros_like(codes.action), "scene": scene})
    return simulate(idle, np.array([2]), scenery=True)
