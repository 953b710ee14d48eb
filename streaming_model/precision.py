"""Which number format the generator computes in on this machine.

bf16 autocast is about twice as fast as fp32 on a CPU with native bf16 arithmetic (AVX512-BF16 or AMX),
but on one without it torch emulates bf16 and a chunk took 25 times longer (1.38 s instead of 56 ms on
an AVX2-only EPYC), so the choice is made per machine: bf16 where the CPU has it, fp32 elsewhere.
``ONSTAGE_PRECISION=bf16`` or ``fp32`` overrides it (to compare the two, or to pin one in a test).

Under bf16 autocast every Linear casts its fp32 weight to bf16 each time a ``computing()`` block first
uses it; ``held_for_compute`` keeps a copy of a model's Linear weights in bf16 instead, which gives the
same products bit for bit (the cast is the same rounding, done once) and took a chunk from 58 to 40 ms on a
Xeon with AMX.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import os
from collections.abc import Iterator

import torch
from torch import nn

PRECISIONS = {"bf16": torch.bfloat16, "fp32": torch.float32}


@functools.cache
def compute_dtype() -> torch.dtype:
    """bf16 where the CPU computes it natively, else fp32 (``ONSTAGE_PRECISION`` overrides)."""
    chosen = os.environ.get("ONSTAGE_PRECISION", "").strip().lower()
    if chosen:
        if chosen not in PRECISIONS:
            raise ValueError(f"ONSTAGE_PRECISION must be one of {sorted(PRECISIONS)}, not {chosen!r}")
        return PRECISIONS[chosen]
    native = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    return torch.bfloat16 if native else torch.float32


@contextlib.contextmanager
def computing() -> Iterator[None]:
    """Inference in the machine's compute format: bf16 autocast, or plain fp32."""
    with (
        torch.inference_mode(),
        torch.autocast("cpu", torch.bfloat16, enabled=compute_dtype() == torch.bfloat16),
    ):
        yield


def held_for_compute(model: nn.Module) -> nn.Module:
    """``model`` itself where the machine computes in fp32; where it computes in bf16, a copy whose
    ``nn.Linear`` layers hold their weights and biases in bf16, for use inside ``computing()`` only (its
    results there are bit-identical to ``model``'s). Other layers keep fp32: an fp32-listed op (a norm, an
    embedding) would read a rounded weight."""
    if compute_dtype() != torch.bfloat16:
        return model
    held = copy.deepcopy(model)
    for module in held.modules():
        if type(module) is nn.Linear:
            module.to(torch.bfloat16)
    return held
