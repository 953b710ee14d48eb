"""What the transformer's attention and products run on (``streaming_model.kernels``): ``onednn`` computes
the same functions as torch's kernels (to float rounding; its packed products bit for bit where sessions
run it), keeps a session's frames independent of what shares its passes, and is what sessions run where the
machine computes in bf16."""

from __future__ import annotations

from typing import cast

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from streaming_model import kernels
from streaming_model.codec import Codec
from streaming_model.dit import Block, DiT
from streaming_model.kernels import (
    PackedLinear,
    chosen_kernels,
    onednn_bf16,
    plain_attention,
    with_kernels,
)
from streaming_model.linears import Int8Linear, with_linears
from streaming_model.precision import compute_dtype, computing
from streaming_model.runtime import Generator
from tests.streaming_model.test_batched import batch_step, cond, twins
from tests.streaming_model.test_passes import pair, play
from tests.support.kernels import alike, rows_independent


@pytest.fixture(scope="module")
def onednn_generator(tiny_models: tuple[DiT, Codec]) -> Generator:
    return Generator(*tiny_models, kernels="onednn")


def test_plain_attention_is_scaled_dot_product_attention() -> None:
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 4, n, 64, generator=gen) for n in (64, 320, 320))
    assert torch.allclose(plain_attention(q, k, v), F.scaled_dot_product_attention(q, k, v), atol=1e-6)


def product_and_gelu() -> tuple[nn.Linear, torch.Tensor, torch.Tensor]:
    """A linear layer, an input, and its product then tanh GELU in fp32 (seeded)."""
    torch.manual_seed(0)
    linear, x = nn.Linear(256, 1024), torch.randn(2, 64, 256)
    return linear, x, F.gelu(linear(x), approximate="tanh")


def test_the_fused_product_is_the_product_then_the_tanh_gelu() -> None:
    linear, x, expected = product_and_gelu()
    assert torch.allclose(PackedLinear(linear, gelu=True)(x), expected, atol=1e-5)


@pytest.mark.skipif(not onednn_bf16(), reason="this CPU's oneDNN has no bf16 products (no AVX512 BW/VL/DQ)")
def test_in_bf16_the_fused_product_rounds_once_after_the_gelu() -> None:
    # No further from the fp32 result than the two ops apart.
    linear, x, expected = product_and_gelu()
    held = nn.Linear(256, 1024).to(torch.bfloat16)
    held.load_state_dict(linear.state_dict())
    fused = (PackedLinear(held, gelu=True)(x).float() - expected).abs().max()
    apart = (F.gelu(held(x.bfloat16()), approximate="tanh").float() - expected).abs().max()
    assert fused <= apart


def test_the_fused_product_gives_a_chunk_the_same_bits_alone_and_beside_another() -> None:
    # Where sessions run it (bf16) a fused pass (two chunks) and a lone chunk must agree bit for bit; in
    # fp32 (only when asked for) the warm-up's batching check is what decides.
    torch.manual_seed(0)
    layer, x = PackedLinear(nn.Linear(256, 1024), gelu=True), torch.randn(128, 256)
    with computing():
        alone, beside = layer(x[:64]), layer(x)[:64]
    if compute_dtype() == torch.bfloat16:
        assert torch.equal(alone, beside)
    else:
        assert torch.allclose(alone, beside, atol=1e-6)


def test_a_packed_product_is_the_linear_layers_bit_for_bit_where_sessions_run_it() -> None:
    torch.manual_seed(0)
    linear, x = nn.Linear(256, 768), torch.randn(2, 64, 256)
    held = nn.Linear(256, 768).to(compute_dtype())
    held.load_state_dict(linear.state_dict())
    with computing():
        packed, plain = PackedLinear(held)(x), held(x)
    assert packed.shape == plain.shape == (2, 64, 768)
    if compute_dtype() == torch.bfloat16:
        assert torch.equal(packed, plain)
    else:
        assert torch.allclose(packed, plain, atol=1e-5)


def test_onednn_packs_every_float_product_of_a_copy_and_leaves_int8_ones(
    tiny_models: tuple[DiT, Codec],
) -> None:
    dit = tiny_models[0]
    assert with_kernels(dit, "torch") is dit
    fast = with_kernels(dit, "onednn")
    mlps = [[type(m) for m in b.mlp.children()] for b in cast("list[Block]", list(fast.blocks))]
    assert mlps == [[PackedLinear, nn.Identity, PackedLinear]] * dit.cfg.depth
    gelus = [m.gelu for m in fast.modules() if isinstance(m, PackedLinear)]
    linears = [n for n, m in dit.named_modules() if type(m) is nn.Linear]
    assert len(gelus) == len(linears) and sum(gelus) == dit.cfg.depth
    assert not any(type(m) is nn.Linear for m in fast.modules())
    # the model given is left as it was
    assert sum(isinstance(m, nn.GELU) for m in dit.modules()) == dit.cfg.depth
    assert not any(isinstance(m, PackedLinear) for m in dit.modules())
    quantised = with_kernels(with_linears(dit, "int8"), "onednn")
    assert not any(isinstance(m, PackedLinear) and m.gelu for m in quantised.modules())
    assert sum(isinstance(m, Int8Linear) for m in quantised.modules()) == 4 * dit.cfg.depth


def test_sessions_run_onednn_where_the_machine_computes_in_bf16(tiny_generator: Generator) -> None:
    assert chosen_kernels("auto") == ("onednn" if compute_dtype() == torch.bfloat16 else "torch")
    assert tiny_generator.kernels == chosen_kernels("auto")
    with pytest.raises(ValueError, match="auto, torch, onednn"):
        chosen_kernels("fast")


def test_an_onednn_session_attends_plainly_and_makes_torch_kernels_latents_to_rounding(
    onednn_generator: Generator, torch_kernels_generator: Generator
) -> None:
    fast, _ = pair(onednn_generator)
    slow, _ = pair(torch_kernels_generator)
    assert fast.cache.attention is plain_attention
    assert any(isinstance(m, PackedLinear) and m.gelu for m in fast.dit.modules())
    for i in range(4):
        a, b = fast.generate(cond(i)), slow.generate(cond(i))
        assert a is not None and b is not None
        # bf16 rounding (3e-3 here); the tanh GELU swapped for a ReLU made it 0.06-0.08.
        assert float((a.latent.float() - b.latent.float()).norm() / b.latent.float().norm()) < 0.01
        fast.commit(a)
        slow.commit(b)


def test_an_onednn_session_commits_in_the_next_pass_as_apart(onednn_generator: Generator) -> None:
    fused, apart = pair(onednn_generator)
    chunks = range(2 * onednn_generator.dit.cfg.max_distance)
    tokens = onednn_generator.dit.cfg.tokens
    exact = rows_independent(onednn_generator.dit_for("float"), 2 * tokens, tokens)
    a, b = play(fused, chunks), play(apart, chunks)
    assert all(alike(x, y, exact) for x, y in zip(a, b, strict=True))


def test_onednn_sessions_get_their_own_frames_in_a_batch(onednn_generator: Generator) -> None:
    alone, batched = twins(onednn_generator, 3)
    tokens = onednn_generator.dit.cfg.tokens
    exact = rows_independent(onednn_generator.dit_for("float"), 3 * 2 * tokens, tokens)
    for i in range(5):
        frames = batch_step(batched, [cond(i)] * 3)
        for a, b in zip(alone, frames, strict=True):
            assert alike(a.step(cond(i)), b, exact)


def test_a_torch_without_the_fused_op_keeps_torchs_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernels, "_has_onednn", lambda: False)
    assert chosen_kernels("auto") == "torch"
    with pytest.raises(ValueError, match="this torch or this CPU lacks them"):
        chosen_kernels("onednn")


def test_a_machine_made_to_compute_in_bf16_without_onednns_bf16_keeps_torchs_kernels(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # ONSTAGE_PRECISION=bf16 on an AVX2-only CPU: oneDNN could not pack the bf16 weights (torch raised from
    # deep in loading); now it is torch's kernels, or a refusal that says why.
    monkeypatch.setattr(kernels, "compute_dtype", lambda: torch.bfloat16)
    monkeypatch.setattr(kernels, "onednn_bf16", lambda: False)
    assert chosen_kernels("auto") == "torch"
    with pytest.raises(ValueError, match="oneDNN's bf16 products"):
        chosen_kernels("onednn")
    monkeypatch.setattr(kernels, "onednn_bf16", lambda: True)
    assert chosen_kernels("auto") == "onednn"
