"""``linears``: the transformer blocks' matrix products as trained (``float``, a runtime session's default)
or dynamically quantised to int8; ``auto`` (a served session's and the evaluation's default) is int8 where
the machine computes in fp32 and float where it computes in bf16 (int8 also stores the adaLN weights in
fp16 and computes the tanh GELU through a sigmoid). An int8 session is as deterministic as a float one
and draws a picture of its own; its chunks come out the same bit for bit whether committed in a fused pass
or apart, batched or alone (each chunk's tokens are quantised with their own scale); the float model is
left exactly as it was (in fp32 and under bf16 autocast alike); the switch reaches sessions through the
tiny backend and the evaluation's options, and a wrong value is refused, saying why."""

from __future__ import annotations

from typing import cast

import numpy as np
import pytest
import torch
from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear

from streaming_model import linears as linears_module
from streaming_model.backends import open_backend
from streaming_model.condition import ChunkCondition
from streaming_model.dit import Block
from streaming_model.eval.options import RunOptions, parse_options
from streaming_model.linears import Fp16Linear, Int8Linear, Linears, SigmoidGELU, chosen_linears
from streaming_model.passes import CommitPass
from streaming_model.runtime import Generator
from streaming_model.tiny import TinyBackend, fusing_is_exact

SCRIPT = [ChunkCondition(action=a) for a in ("idle", "wave", "walk_left", "nod", "jump")]


def frames(
    gen: Generator, linears: Linears | None = None, seed: int = 2, commit_pass: CommitPass = "fused"
) -> np.ndarray:
    if linears is None:  # as every live session opens today
        session = gen.open_session(identity=4, seed=seed)
    else:
        session = gen.open_session(identity=4, seed=seed, linears=linears, commit_pass=commit_pass)
    return np.stack([session.step(c) for c in SCRIPT])


def test_float_is_the_default_and_int8_sessions_repeat_themselves(tiny_generator: Generator) -> None:
    before = frames(tiny_generator)
    fast = frames(tiny_generator, "int8")
    assert np.array_equal(frames(tiny_generator, "int8"), fast)  # same seed, same frames
    assert not np.array_equal(fast, before)  # the products really are others
    assert np.array_equal(frames(tiny_generator, "float"), before)
    assert np.array_equal(frames(tiny_generator), before)  # quantising a copy left the float model alone
    # Quantised, not wrecked: a tiny random model's int8 picture stays close to its float one.
    assert np.abs(fast.astype(int) - before.astype(int)).mean() < 8


def test_the_blocks_token_wise_layers_go_int8_their_modulation_fp16_and_nothing_else(
    tiny_generator: Generator,
) -> None:
    fast = tiny_generator.dit_for("int8")
    assert fast is tiny_generator.dit_for("int8")  # one copy, shared by the sessions that ask for it
    quantised = {n for n, m in fast.named_modules() if isinstance(m, Int8Linear)}
    halved = {n for n, m in fast.named_modules() if isinstance(m, Fp16Linear)}
    assert all(
        isinstance(m.products, DynamicLinear)
        for m in fast.modules()
        if isinstance(m, (Int8Linear, Fp16Linear))
    )
    floats = {n for n, m in tiny_generator.dit.named_modules() if type(m) is torch.nn.Linear}
    # The adaLN modulation (a row per chunk) keeps fp32 products on fp16 weights; the layers outside the
    # blocks stay float.
    assert quantised == {n for n in floats if n.startswith("blocks.") and not n.endswith(".ada")}
    assert halved == {n for n in floats if n.startswith("blocks.") and n.endswith(".ada")}
    assert len(quantised) == 4 * len(tiny_generator.dit.blocks)
    gelus = [type(m) for m in fast.modules() if isinstance(m, (torch.nn.GELU, SigmoidGELU))]
    assert gelus == [SigmoidGELU] * len(tiny_generator.dit.blocks)
    left = tiny_generator.dit.modules()
    assert not any(isinstance(m, (Int8Linear, Fp16Linear, DynamicLinear, SigmoidGELU)) for m in left)


def test_the_sigmoid_gelu_is_the_tanh_gelu_to_float_rounding() -> None:
    x = torch.linspace(-12.0, 12.0, 100_001)
    with torch.inference_mode():
        fast = SigmoidGELU()(x)
        trained = torch.nn.GELU("tanh")(x)
        assert torch.allclose(fast, trained, rtol=1e-6, atol=1e-6)
        assert not torch.equal(fast, trained)  # computed otherwise, not handed to torch's own
        half = x.bfloat16()
        assert torch.equal(SigmoidGELU()(half), torch.nn.GELU("tanh")(half))  # not fp32: torch's own


def test_the_tiny_backend_takes_linears_as_an_option(tiny_generator: Generator) -> None:
    backend = TinyBackend(tiny_generator, warmup_chunks=1, linears="int8")
    session = backend.open_session(identity=4, seed=2)
    through_backend = []
    for c in SCRIPT:
        pending = session.generate(c)
        assert pending is not None
        through_backend.append(session.decode(pending))
        session.commit(pending)
    # A chunk's activations have a scale of their own: it commits in the next chunk's pass wherever the
    # float path does
    if fusing_is_exact(tiny_generator, steps=backend.steps, linears="float"):
        assert backend.commit_pass == "fused"
    assert np.array_equal(np.stack(through_backend), frames(tiny_generator, "int8", commit_pass="apart"))
    assert np.array_equal(np.stack(through_backend), frames(tiny_generator, "int8", commit_pass="fused"))
    with pytest.raises(ValueError, match="linears must be one of auto, float, int8, not 'fp8'"):
        open_backend("tiny", {"linears": "fp8"})


def test_the_evaluation_takes_linears_as_an_option() -> None:
    assert parse_options([]).linears == "auto"
    options = parse_options(["steps=1", "linears=int8"])
    assert options == RunOptions(steps=1, linears="int8")
    assert options.describe(["steps", "linears"]) == "steps=1 linears=int8"
    with pytest.raises(ValueError, match="option linears takes auto or float or int8, not 'int4'"):
        parse_options(["linears=int4"])


INT8_KERNELS = "fbgemm" in torch.backends.quantized.supported_engines  # x86 builds of torch


@pytest.mark.parametrize(
    ("computes_in", "chosen"),
    [(torch.float32, "int8" if INT8_KERNELS else "float"), (torch.bfloat16, "float")],
)
def test_auto_is_int8_where_the_machine_computes_in_fp32_and_float_where_in_bf16(
    monkeypatch: pytest.MonkeyPatch, computes_in: torch.dtype, chosen: str
) -> None:
    monkeypatch.setattr(linears_module, "compute_dtype", lambda: computes_in)
    assert chosen_linears("auto") == chosen
    assert (chosen_linears("float"), chosen_linears("int8")) == ("float", "int8")  # asked for: as asked


def test_a_served_session_computes_as_the_machine_chooses(tiny_generator: Generator) -> None:
    served = TinyBackend(tiny_generator, warmup_chunks=1)
    assert served.linears == chosen_linears("auto")
    assert tiny_generator.dit_for("auto") is tiny_generator.dit_for(served.linears)  # one model, shared


def test_the_int8_mlp_keeps_its_sums_in_fp32_between_its_products_under_bf16_autocast(
    tiny_generator: Generator,
) -> None:
    block = cast("Block", tiny_generator.dit_for("int8").blocks[0])
    x = torch.randn(1, 2, 64, tiny_generator.dit.cfg.width)
    with torch.inference_mode(), torch.autocast("cpu", torch.bfloat16):
        assert block.mlp[0](x).dtype == torch.float32  # straight into the GELU and the next int8 product
        assert block.mlp(x).dtype == torch.bfloat16  # what leaves the MLP is what a Linear gives
        assert block.qkv(x).dtype == torch.bfloat16
