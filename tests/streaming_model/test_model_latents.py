"""The transformer's own latents a decoder is taught on are exactly what a session of the same script (its
actions in the seed's order) decodes, and they are generated once and kept."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from streaming_model.codec import to_uint8
from streaming_model.evaluate import script
from streaming_model.precision import computing
from streaming_model.runtime import Generator
from streaming_model.sampler import STEPS
from streaming_model.train.model_latents import ORDER, cached_latents, scripted_latents
from streaming_model.world.palette import NUM_IDENTITIES


def test_a_scripted_sessions_latents_decode_to_the_frames_the_session_shows(
    tiny_generator: Generator,
) -> None:
    seed = 3
    bank = scripted_latents(tiny_generator, [seed], progress=lambda line: None)
    conds = script(seed, order=ORDER)[0]
    assert ORDER == "shuffled" and conds != script(seed)[0]
    assert len(bank.latent) == len(bank.voice) == len(conds)
    session = tiny_generator.open_session(identity=seed % NUM_IDENTITIES, seed=seed)
    shown = np.stack([session.step(c) for c in conds])
    with computing():  # as a session decodes: one chunk at a time, in the compute format
        codec = tiny_generator.codec
        drawn = np.stack(
            [
                to_uint8(codec.decode(z[None], v[None]))[0].numpy()
                for z, v in zip(bank.latent, bank.voice, strict=True)
            ]
        )
    assert np.array_equal(drawn, shown)
    # The talking segment's voice reaches the decoder with its chunks; the rest of the script is silent.
    assert 0 < int((bank.voice.abs().sum(1) > 0).sum()) < len(conds)
    # The chunks made under a turn, around or to a side, are marked as such.
    assert bank.turning.tolist() == [c.action == "turn" for c in conds] and bank.turning.any()


def test_the_latents_are_generated_once_and_made_anew_for_other_seeds(
    tiny_generator: Generator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kept = tmp_path / "latents.pt"
    first = cached_latents(kept, tiny_generator, [1])
    calls: list[list[int]] = []

    def counted(gen: Generator, seeds: list[int], steps: int) -> object:
        calls.append(list(seeds))
        return scripted_latents(gen, seeds, steps, progress=lambda line: None)

    monkeypatch.setattr("streaming_model.train.model_latents.scripted_latents", counted)
    again = cached_latents(kept, tiny_generator, [1])
    assert calls == [] and all(torch.equal(a, b) for a, b in zip(again, first, strict=True))
    other = cached_latents(kept, tiny_generator, [2])
    assert calls == [[2]] and not torch.equal(other.latent[: len(first.latent)], first.latent)
    # Latents kept before a field was added, or in the manifest's order, are made anew, as other seeds are.
    torch.save({"seeds": [2], "steps": STEPS, "latent": other.latent, "voice": other.voice}, kept)
    cached_latents(kept, tiny_generator, [2])
    assert calls == [[2], [2]]
    torch.save({"seeds": [2], "steps": STEPS, **other._asdict()}, kept)
    cached_latents(kept, tiny_generator, [2])
    assert calls == [[2], [2], [2]]
