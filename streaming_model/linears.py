"""What the DiT blocks compute with: ``float`` (as trained) or ``int8`` (the fast path where the machine
computes in fp32).

``int8`` is dynamic quantisation (``torch.ao.quantization.quantize_dynamic``, the fbgemm engine): weights
stored as int8 with one scale per matrix, activations quantised on every call from their own range,
products accumulated in int32. The token-wise products of a block (q/k/v, projection, MLP) take it. The
adaLN modulation (a row per chunk, memory-bound: its weights are a third of the blocks') keeps fp32
products on weights stored in fp16 (``Fp16Linear``), and the MLP's tanh GELU is computed through a sigmoid
(``SigmoidGELU``: the same function to float rounding, 2.4x faster where torch's tanh is slow, as on an
AVX2 EPYC). The patch embedding, the condition MLPs and the output head stay float, as do norms,
attention and the decoder.

Each chunk's tokens are quantised with a scale of their own (``Int8Linear``): with one scale per call, a
chunk's picture would depend on what else shared the call (other sessions in a batch, the chunk being
committed beside the next one in a fused pass). Integer products sum exactly in any order, so a chunk's
outputs are then the same bit for bit however the chunks are grouped, as the float path's are.

It is a speed switch: what it does to the picture is measured by ``onstage eval`` with ``linears=int8``,
never assumed. ``auto`` (what sessions run unless told) chooses per machine: int8 where the machine computes
in fp32 (it paid there: 6 % of a chunk and 16 % of a lone session's cores on an AVX2 EPYC), float where it
computes in bf16. There its kernels read fp32, so every input is widened; with the MLP's sums kept in fp32
between its products a lone chunk took 0.96x the float path's on an EPYC with AVX512-BF16, but 8
gesture-only sessions there held real time with float linears and none with int8 (``benchmarks/capacity.py``;
likely the batches: each chunk's tokens are quantised alone, in a call of their own, where float products
take the batch's rows in one).
"""

from __future__ import annotations

import copy
import math
import warnings
from typing import Literal, cast, get_args

import torch
from torch import nn
from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear
from torch.ao.quantization import quantize_dynamic
from torch.nn import functional as F

from .choices import one_of
from .dit import Block, DiT
from .precision import compute_dtype

Linears = Literal["float", "int8"]
"""What the blocks compute in, once chosen."""
LinearsChoice = Literal["auto", "float", "int8"]
"""What may be asked for: ``auto`` is this machine's choice (``chosen_linears``)."""
LINEARS: tuple[str, ...] = get_args(LinearsChoice)
"""The choices, the served default (``auto``) first."""


def check_linears(linears: str) -> LinearsChoice:
    """``linears`` as a ``LinearsChoice``; ``ValueError`` naming the choices for anything else."""
    return cast("LinearsChoice", one_of(linears, LINEARS, "linears"))


def chosen_linears(linears: str) -> Linears:
    """What ``linears`` computes in on this machine: ``auto`` is ``int8`` where it computes in fp32 and
    torch has the fbgemm engine, ``float`` elsewhere (``check_linears``' error for anything else)."""
    choice = check_linears(linears)
    if choice != "auto":
        return choice
    fp32 = compute_dtype() == torch.float32
    return "int8" if fp32 and "fbgemm" in torch.backends.quantized.supported_engines else "float"


QUANTISED = ("qkv", "proj", "mlp")
"""The block's layers whose Linear layers go int8 (the token-wise ones)."""
HALVED = ("ada",)
"""The block's layers whose weights are stored in fp16."""
_GELU_LINEAR = 2.0 * math.sqrt(2.0 / math.pi)  # tanh's argument times two: 0.5 (1 + tanh u) = sigmoid(2u)
_GELU_CUBIC = _GELU_LINEAR * 0.044715


def _as_autocast(y: torch.Tensor) -> torch.Tensor:
    """A quantised product's fp32 output as a Linear's would be: in bf16 under bf16 autocast."""
    if torch.is_autocast_enabled("cpu"):
        return y.to(torch.get_autocast_dtype("cpu"))
    return y


class SigmoidGELU(nn.Module):
    """``nn.GELU("tanh")`` computed as x * sigmoid(2 sqrt(2/pi) (x + 0.044715 x^3)), in place on its own
    temporaries: for inference only (``with_linears``' copy). Other than fp32 input goes to torch's own."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The tanh-approximated GELU of x."""
        if x.dtype != torch.float32:
            return F.gelu(x, approximate="tanh")
        u = x * x
        return u.mul_(_GELU_CUBIC).add_(_GELU_LINEAR).mul_(x).sigmoid_().mul_(x)


class Fp16Linear(nn.Module):
    """A Linear whose weight is stored in fp16 (fbgemm), its products in fp32: each row computed alone, so
    a chunk's modulation does not depend on what shares the call."""

    def __init__(self, products: nn.Module) -> None:
        super().__init__()
        self.products = products

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x @ W.T + b with W rounded to fp16."""
        return _as_autocast(self.products(x.float()))


class Int8Linear(nn.Module):
    """A dynamically quantised Linear that takes what a float one takes, tokens (..., T, w): each (T, w)
    matrix (one chunk's tokens) is quantised with its own scale. Its int8 kernels read fp32 only, so under
    bf16 autocast the input is widened and the output given back in bf16, as a Linear's would, unless
    ``fp32_out`` is set (``with_linears`` sets it where what comes next reads fp32 anyway: the MLP's GELU
    and its second product)."""

    def __init__(self, products: nn.Module) -> None:
        super().__init__()
        self.products = products
        self.fp32_out = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x @ W.T + b with W in int8 and each chunk's x quantised from its own range."""
        chunks = x.float().reshape(-1, *x.shape[-2:])
        y = torch.stack([self.products(chunk) for chunk in chunks]).reshape(*x.shape[:-1], -1)
        return y if self.fp32_out else _as_autocast(y)


def with_linears(dit: DiT, linears: LinearsChoice) -> DiT:
    """``dit`` itself for ``float``; for ``int8`` a copy whose blocks' token-wise Linear layers
    (``QUANTISED``) are dynamically quantised, their adaLN weights (``HALVED``) stored in fp16 and their
    GELU a ``SigmoidGELU`` (``dit`` is left as it was); ``auto`` as chosen here."""
    if chosen_linears(linears) == "float":
        return dit
    if "fbgemm" not in torch.backends.quantized.supported_engines:
        raise ValueError("linears=int8 needs torch's fbgemm engine (x86), which this torch lacks")
    # The engine is process-wide; fbgemm is the x86 one whose dynamic int8 products paid on AVX2.
    torch.backends.quantized.engine = "fbgemm"
    quantised = copy.deepcopy(dit)
    for block in cast("list[Block]", list(quantised.blocks)):  # a ModuleList yields plain Modules to mypy
        for layer in QUANTISED:
            setattr(block, layer, _dynamic(getattr(block, layer), torch.qint8, Int8Linear))
        for layer in HALVED:
            setattr(block, layer, _dynamic(getattr(block, layer), torch.float16, Fp16Linear))
        gelus = [name for name, child in block.mlp.named_children() if isinstance(child, nn.GELU)]
        for name in gelus:
            setattr(block.mlp, name, SigmoidGELU())
        # The MLP's first product feeds the GELU and the second product in fp32 under bf16 autocast too:
        # rounding it to bf16 only for the next int8 product to widen it again cost a bf16 GELU (267 us
        # against the fp32 sigmoid form's) and two casts, 4 % of a chunk on an EPYC with AVX512-BF16.
        first = block.mlp[0]
        if isinstance(first, Int8Linear):
            first.fp32_out = True
    return quantised.eval()


def _dynamic(layer: nn.Module, dtype: torch.dtype, wrapper: type[Int8Linear | Fp16Linear]) -> nn.Module:
    """``layer`` (a Linear, or a Sequential holding some, changed in place) with every Linear dynamically
    quantised to ``dtype`` and held by ``wrapper``."""
    # torch.ao.quantization warns that it is deprecated in favour of torchao (another package); the pinned
    # torch (2.13) still ships it, and eval measures what it computes either way.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", UserWarning)
        # in place: ``layer`` is already the caller's copy
        held = quantize_dynamic(nn.Sequential(layer), {nn.Linear}, dtype=dtype, inplace=True)
    found = [
        (parent, name, child)
        for parent in held.modules()
        for name, child in parent.named_children()
        if isinstance(child, DynamicLinear)
    ]
    for parent, name, child in found:  # replaced once all are found: the walk would meet its own wrappers
        setattr(parent, name, wrapper(child))
    return held[0]
