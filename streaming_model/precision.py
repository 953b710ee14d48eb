"""Which number format the generator computes in on this machine.

bf16 autocast is about twice as fast as fp32 on a CPU with native bf16 arithmetic (AVX512-BF16 or AMX),
but on one without it torch emulates bf16 and a chunk took 25 times longer (1.38 s instead of 56 ms on
an AVX2-only EPYC), so the choice is made per machine: bf16 where the CPU has it, fp32 elsewhere.
``ONSTAGE_PRECISION=bf16`` or ``fp32`` overrides it (to compare the two, or to pin one in a test).
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator

import torch

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
