"""Which kernels the transformer's attention and products run on: ``torch`` (each op as torch computes it,
the path as trained) or ``onednn`` (kernels that pay where the machine computes in bf16).

``onednn`` changes three things. Attention is two plain matrix products and a softmax instead of torch's
flash attention, whose CPU kernel is built for long sequences: for a chunk's 64 queries over 320 keys in
bf16 it took 316 us against 219 on an EPYC with AVX512-BF16 (its probabilities are rounded to bf16 before
the second product, where flash attention keeps them in fp32). And the MLP's first product and its tanh
GELU are one oneDNN call, the GELU applied to the fp32 sums before they are rounded to bf16 (torch's bf16
tanh GELU alone took 267 us for the (128, 1024) activations there; the fused call 406 against 625 for the
two; an MLP whose products are int8, ``streaming_model.linears``, keeps its own GELU). On that machine a
chunk with float linears (as served there) took 0.94x the time, one with int8 linears 0.97x. And every
float product's weight is reordered once into oneDNN's layout (``PackedLinear``), where ``F.linear``
reorders it on every call: the same bits, and 0.94x the chunk again. With fp32 arithmetic the plain
attention was the slower (344 against 298 us), so ``auto`` (what sessions run unless told) chooses
``onednn`` only where the machine computes in bf16 (``precision.compute_dtype``); nobody has timed the
packed weights in fp32.

None changes what a row depends on: a chunk's attention reads only its own session's keys, and the
fused call gave a chunk's rows the same bits alone as among others (checked at warm-up with the rest of a
batch: ``warmup.measure_batching``). What it does to the picture is measured by ``onstage eval`` with
``kernels=torch`` against ``kernels=onednn``, never assumed.
"""

from __future__ import annotations

import copy
from typing import Literal, cast, get_args

import torch
from torch import nn
from torch.nn import functional as F

from .choices import one_of
from .dit import Block, DiT
from .kv_cache import Attention
from .precision import compute_dtype

Kernels = Literal["torch", "onednn"]
"""What the attention and the MLP run on, once chosen."""
KernelsChoice = Literal["auto", "torch", "onednn"]
"""What may be asked for: ``auto`` is this machine's choice (``chosen_kernels``)."""
KERNELS: tuple[str, ...] = get_args(KernelsChoice)
"""The choices, the served default (``auto``) first."""


def check_kernels(kernels: str) -> KernelsChoice:
    """``kernels`` as a ``KernelsChoice``; ``ValueError`` naming the choices for anything else."""
    return cast("KernelsChoice", one_of(kernels, KERNELS, "kernels"))


def chosen_kernels(kernels: str) -> Kernels:
    """What ``kernels`` runs on this machine: ``auto`` is ``onednn`` where it computes in bf16 and torch
    has oneDNN, ``torch`` elsewhere (``check_kernels``' error for anything else)."""
    choice = check_kernels(kernels)
    if choice == "onednn" and not _has_onednn():
        raise ValueError(
            "kernels=onednn needs torch's oneDNN linear ops (mkldnn._linear_pointwise and "
            "_reorder_linear_weight) and, where the machine computes in bf16, oneDNN's bf16 products "
            "(AVX512 BW/VL/DQ or AVX-NE-CONVERT): this torch or this CPU lacks them"
        )
    if choice != "auto":
        return choice
    return "onednn" if compute_dtype() == torch.bfloat16 and _has_onednn() else "torch"


def _has_onednn() -> bool:
    # Private ops of torch's (the pinned torch has them); without them, torch's kernels rather than a failure.
    ops = ("_linear_pointwise", "_reorder_linear_weight")
    if not (torch.backends.mkldnn.is_available() and all(hasattr(torch.ops.mkldnn, op) for op in ops)):
        return False
    # oneDNN cannot pack bf16 weights without AVX512 (BW, VL, DQ) or AVX-NE-CONVERT: a machine made to
    # compute in bf16 without them (ONSTAGE_PRECISION=bf16 on an AVX2-only CPU) keeps torch's kernels.
    return compute_dtype() != torch.bfloat16 or onednn_bf16()


def onednn_bf16() -> bool:
    """Whether this CPU's oneDNN computes bf16 products (and packs bf16 weights)."""
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def plain_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T / sqrt(d)) v as two matrix products, in the inputs' dtype."""
    # The queries scaled rather than the scores: a fifth of the values here (64 queries, 320 keys), and
    # the same bits where 1 / sqrt(d) is a power of two (d = 64).
    scores = torch.matmul(q * (q.shape[-1] ** -0.5), k.transpose(-2, -1))
    return torch.matmul(scores.softmax(dim=-1), v)


def attention_for(kernels: Kernels) -> Attention:
    """The attention a session's cache runs: torch's ``scaled_dot_product_attention`` or
    ``plain_attention``."""
    return plain_attention if kernels == "onednn" else F.scaled_dot_product_attention


class PackedLinear(nn.Module):
    """A Linear on oneDNN with its weight reordered once for oneDNN's kernels
    (``torch.ops.mkldnn._reorder_linear_weight``) where ``F.linear`` reorders it on every call: the same
    bits, less time (a (8, 256) by (256, 1536) adaLN product took 49 us against 75). With ``gelu``, the tanh
    GELU after it in the same call (``torch.ops.mkldnn._linear_pointwise``, the op torch's own compiler
    fuses them into): the GELU of the fp32 sums, one rounding to the weight's dtype. For inference only
    (``with_kernels``' copy)."""

    def __init__(self, linear: nn.Linear, gelu: bool = False) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        # The layout is chosen for a number of rows; any number computes the same bits (tested).
        self.weight = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), _ROWS)
        self.bias = None if linear.bias is None else linear.bias.detach()
        self.gelu = gelu

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x W^T + b over the last dimension (its GELU with ``gelu``), in the weight's dtype, as
        ``F.linear`` under the machine's autocast."""
        rows = x.reshape(-1, self.in_features).to(self.weight.dtype)
        attr, algorithm = ("gelu", "tanh") if self.gelu else ("none", "")
        y = torch.ops.mkldnn._linear_pointwise(rows, self.weight, self.bias, attr, [], algorithm)
        return y.reshape(*x.shape[:-1], self.out_features)


_ROWS = 64
"""The rows a packed weight's layout is chosen for: one chunk's tokens."""


def with_kernels(dit: DiT, kernels: Kernels) -> DiT:
    """``dit`` itself for ``torch``; for ``onednn`` a copy whose float ``nn.Linear`` layers are
    ``PackedLinear``: each MLP's first product with the tanh GELU after it in one call, every other one alone
    (int8 products, ``streaming_model.linears``, stay as they are). ``dit`` is left as it was."""
    if kernels == "torch":
        return dit
    out = copy.deepcopy(dit)
    for block in cast("list[Block]", list(out.blocks)):  # a ModuleList yields plain Modules to mypy
        first, act = block.mlp[0], block.mlp[1]
        if type(first) is nn.Linear and isinstance(act, nn.GELU) and act.approximate == "tanh":
            block.mlp[0], block.mlp[1] = PackedLinear(first, gelu=True), nn.Identity()  # names kept
    found = [
        (parent, name, child)
        for parent in out.modules()
        for name, child in parent.named_children()
        if type(child) is nn.Linear
    ]
    for parent, name, child in found:  # replaced once all are found: the walk would meet its own layers
        setattr(parent, name, PackedLinear(child))
    return out.eval()
