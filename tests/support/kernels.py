"""Whether this machine's matrix kernels give a row the same bits whatever the number of rows: what
bit-for-bit claims across batch sizes rest on. Kernels that split the inner dimension by the number of
rows (bf16 on AMX does, past 128 rows of a 1024-wide product) sum in another order at another size."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from streaming_model.dit import DiT
from streaming_model.kernels import PackedLinear
from streaming_model.linears import Int8Linear
from streaming_model.precision import computing


def rows_independent(dit: DiT, rows: int, tokens: int = 64) -> bool:
    """Whether each Linear layer of ``dit`` (packed or not, with its GELU or without) gives its first
    ``tokens`` rows the same bits at ``rows`` rows as at ``tokens`` (random inputs, in the machine's compute
    format)."""
    gen = torch.Generator().manual_seed(0)
    with computing():
        for layer in dit.modules():
            if not (type(layer) is nn.Linear or isinstance(layer, PackedLinear)):
                continue
            x = torch.randn(rows, layer.in_features, generator=gen)
            if not torch.equal(layer(x)[:tokens], layer(x[:tokens])):
                return False
    return True


def alike(a: np.ndarray, b: np.ndarray, exact: bool, levels: float = 0.5) -> bool:
    """Frames the same bit for bit (``exact``), or else differing in their last bits only: under ``levels``
    per pixel on average (half a level; JPEG pictures, whose blocks a last bit can tip, want more), where
    another session's picture would differ by tens."""
    return np.array_equal(a, b) if exact else float(np.abs(a.astype(np.int16) - b).mean()) < levels


def one_int8_scale_per_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make int8 products quantise all of a call's activations with one scale (fbgemm's dynamic Linear
    alone, without ``Int8Linear``'s scale per chunk): a chunk's bits then depend on what shares the call,
    which the warm-up's checks must find."""
    monkeypatch.setattr(Int8Linear, "forward", lambda self, x: self.products(x.float()))
