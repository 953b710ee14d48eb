"""The decoder's output layer in parity form computes what the transposed convolution computes, to float
rounding, with a chunk's bits independent of the other sessions in its batch; sessions decode with it
unless told not to."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from streaming_model.backends import open_backend
from streaming_model.condition import ChunkCondition
from streaming_model.loading import SLIM_CODEC_PATH, load_codec
from streaming_model.runtime import Generator
from streaming_model.tiny import TinyBackend
from streaming_model.upsample import ParityUpsample, with_upsample


@pytest.mark.parametrize(("channels_in", "channels_out", "rows", "cols"), [(32, 3, 16, 16), (8, 5, 7, 9)])
@pytest.mark.parametrize("channels_last", [True, False])
def test_the_parity_form_computes_the_transposed_convolution(
    channels_in: int, channels_out: int, rows: int, cols: int, channels_last: bool
) -> None:
    torch.manual_seed(channels_in)
    transposed = nn.ConvTranspose2d(channels_in, channels_out, 4, stride=2, padding=1).eval()
    parity = ParityUpsample(transposed).eval()
    x = torch.randn(6, channels_in, rows, cols)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    with torch.inference_mode():
        want, got = transposed(x), parity(x)
    assert got.shape == want.shape == (6, channels_out, 2 * rows, 2 * cols)
    assert torch.allclose(got, want, atol=1e-5, rtol=0)
    assert not torch.equal(got, torch.zeros_like(got))


def test_a_chunks_frames_get_the_same_bits_alone_as_beside_other_sessions_frames() -> None:
    # As a Generator holds it (channels last) and at the served layer's shape: a chunk is 4 frames of 64x64.
    torch.manual_seed(1)
    transposed = nn.ConvTranspose2d(32, 3, 4, stride=2, padding=1).eval()
    parity = ParityUpsample(transposed).eval().to(memory_format=torch.channels_last)  # type: ignore[call-overload]  # torch accepts memory_format here; its stubs omit it
    frames = torch.randn(12, 32, 64, 64).contiguous(memory_format=torch.channels_last)
    with torch.inference_mode():
        three = parity(frames)
        assert torch.equal(parity(frames[:4].clone()), three[:4])
        assert torch.equal(parity(frames[4:12].clone()), three[4:12])


def test_only_a_4x4_transposed_convolution_of_stride_2_and_padding_1_has_a_parity_form() -> None:
    with pytest.raises(ValueError, match="parity form"):
        ParityUpsample(nn.ConvTranspose2d(4, 3, 3, stride=2, padding=1))


def test_the_served_codec_upsamples_in_parity_form_and_the_codec_given_is_left_as_trained() -> None:
    codec = load_codec(SLIM_CODEC_PATH)
    assert with_upsample(codec, "transposed") is codec
    served = with_upsample(codec, "parity")
    assert isinstance(served.decoder.frame[-1], ParityUpsample)
    assert isinstance(codec.decoder.frame[-1], nn.ConvTranspose2d)
    with pytest.raises(ValueError, match="upsample must be one of parity, transposed"):
        with_upsample(codec, "nearest")  # type: ignore[arg-type]  # what a caller could pass unchecked


def test_a_session_decodes_the_same_picture_either_way_to_a_level_of_eight_bits() -> None:
    frames = {}
    for upsample in ("parity", "transposed"):
        session = Generator.load(upsample=upsample).open_session(identity=2, seed=4, steps=1)
        frames[upsample] = np.stack([session.step(ChunkCondition(action=a)) for a in ("idle", "wave", "nod")])
    parity, transposed = frames["parity"].astype(int), frames["transposed"].astype(int)
    assert np.abs(parity - transposed).max() <= 1
    assert (parity != transposed).mean() < 0.01


def test_the_tiny_backend_serves_the_parity_form_unless_told_to_upsample_as_trained() -> None:
    served = open_backend("tiny", {"max_batch": "1"})
    trained = open_backend("tiny", {"max_batch": "1", "upsample": "transposed"})
    assert isinstance(served, TinyBackend) and isinstance(trained, TinyBackend)
    assert isinstance(served.generator.codec.decoder.frame[-1], ParityUpsample)
    assert isinstance(trained.generator.codec.decoder.frame[-1], nn.ConvTranspose2d)
    with pytest.raises(ValueError, match="upsample must be one of parity, transposed, not 'bilinear'"):
        open_backend("tiny", {"upsample": "bilinear"})
