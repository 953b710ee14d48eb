"""The codec compresses 8x8 in space and 4x in time, and the shipped one keeps what the probes read."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from streaming_model.codec import Codec, CodecConfig, chunk_voices, to_pixels, to_uint8
from streaming_model.condition import ChunkCodes
from streaming_model.loading import CODEC_PATH, load_codec
from streaming_model.precision import computing
from streaming_model.probes import identify, measure
from streaming_model.world.episodes import Episode, random_codes, random_episode, simulate


def voices_of(ep: Episode) -> torch.Tensor:
    """Per-frame voice values (the envelope while speaking) of an episode's worlds, (N, frames)."""
    codes = ep.codes
    return torch.from_numpy(codes.audio * codes.speaking[..., None]).flatten(1)


def test_a_four_frame_chunk_becomes_one_16x16_latent_frame() -> None:
    codec = Codec(CodecConfig(c1=8, c2=16, c3=16, mix=32)).eval()
    x = to_pixels(torch.from_numpy(random_episode(0, 1, 1).frames))  # (1, 4, 3, 128, 128)
    with torch.inference_mode():
        z = codec.encode(x)
        y = codec.decode(z)
    assert z.shape == (1, 16, 16, 16)
    assert y.shape == x.shape


def test_pixel_conversion_round_trips() -> None:
    frames = torch.from_numpy(random_episode(0, 1, 1).frames[0])
    assert torch.equal(to_uint8(to_pixels(frames)), frames)


@pytest.mark.skipif(not CODEC_PATH.exists(), reason="no shipped codec weights yet")
def test_probes_still_read_the_shipped_codecs_reconstructions() -> None:
    codec = load_codec()
    ep = random_episode(20_000, 4, 12)  # seeds the codec never trained on
    chunks = torch.from_numpy(ep.frames.reshape(-1, 4, 128, 128, 3))
    voice = chunk_voices(voices_of(ep), codec.cfg.voice_taps).flatten(0, 1)
    with computing():
        rec = to_uint8(codec.decode(codec.encode(to_pixels(chunks)), voice).float()).numpy()
    rec = rec.reshape(ep.frames.shape)
    mse = ((rec.astype(np.float64) - ep.frames) ** 2).mean()
    assert 10 * np.log10(255.0**2 / mse) > 25.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(4):
            ident = int(ep.identity[i])
            assert (identify(rec[i]) == ident).mean() > 0.95
            got, true = measure(rec[i], ident), measure(ep.frames[i], ident)
            assert np.nanmax(np.abs(got.x - true.x)) < 4.0
            for name in ("paw_left", "paw_right", "sitting", "jumping"):
                assert (getattr(got, name) == getattr(true, name)).mean() > 0.9, name
            if np.std(true.mouth) > 0.05:
                assert np.corrcoef(got.mouth, true.mouth)[0, 1] > 0.7


@pytest.mark.skipif(not CODEC_PATH.exists(), reason="no shipped codec weights yet")
def test_the_shipped_decoder_draws_the_mouth_from_the_voice_not_from_the_latent() -> None:
    codec = load_codec()
    assert codec.cfg.voice_taps > 0
    rng = np.random.default_rng(30_000)  # seeds the codec never trained on
    codes = random_codes(rng, 4, 12)
    identity = np.arange(4)
    talking = simulate(ChunkCodes(**{**vars(codes), "speaking": np.ones_like(codes.speaking)}), identity)
    # The same worlds with the mouth closed throughout: the latents carry no mouth movement.
    silent = simulate(ChunkCodes(**{**vars(codes), "speaking": np.zeros_like(codes.speaking)}), identity)
    chunks = torch.from_numpy(silent.frames.reshape(-1, 4, 128, 128, 3))
    voice = chunk_voices(voices_of(talking), codec.cfg.voice_taps).flatten(0, 1)
    with computing():
        z = codec.encode(to_pixels(chunks))
        spoken = to_uint8(codec.decode(z, voice).float()).numpy().reshape(talking.frames.shape)
        quiet = (
            to_uint8(codec.decode(z, torch.zeros_like(voice)).float()).numpy().reshape(talking.frames.shape)
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = np.concatenate([np.nan_to_num(measure(spoken[i], i).mouth) for i in range(4)])
        closed = np.concatenate([np.nan_to_num(measure(quiet[i], i).mouth) for i in range(4)])
    assert np.corrcoef(got, talking.truth["mouth"].ravel())[0, 1] > 0.7
    assert closed.mean() < 0.5 * got.mean()  # silence: only what the face itself does (a surprised face)
