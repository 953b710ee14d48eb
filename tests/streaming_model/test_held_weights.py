"""Where the machine computes in bf16, sessions run a copy of the transformer whose Linear weights are held
in bf16 (``precision.held_for_compute``) instead of being cast on every use: the frames are bit for bit
those of the fp32 model as loaded, which the Generator keeps as it was. Where it computes in fp32 the copy
is the model itself. (On torch's kernels: ``kernels=onednn`` computes otherwise, on purpose.)"""

from __future__ import annotations

import numpy as np
import torch

from streaming_model.condition import ChunkCondition
from streaming_model.linears import with_linears
from streaming_model.precision import compute_dtype
from streaming_model.runtime import Generator, Session
from streaming_model.sampler import STEPS
from streaming_model.world.episodes import reference_chunk

SCRIPT = [ChunkCondition(action=a, speaking=a == "nod") for a in ("idle", "wave", "walk_left", "nod", "sit")]


def test_sessions_draw_the_loaded_models_frames_bit_for_bit(torch_kernels_generator: Generator) -> None:
    tiny_generator = torch_kernels_generator
    reference = reference_chunk(np.array([2]))[0]
    loaded = Session(tiny_generator, reference, 9, STEPS, "write_time", 8, 0.0, tiny_generator.dit)
    served = tiny_generator.open_session(reference=reference, seed=9)
    for cond in SCRIPT:
        assert np.array_equal(served.step(cond), loaded.step(cond))
    weights = {m.weight.dtype for m in served.dit.modules() if type(m) is torch.nn.Linear}
    if compute_dtype() == torch.bfloat16:
        assert weights == {torch.bfloat16}
        assert served.dit is not tiny_generator.dit
    else:
        assert served.dit is tiny_generator.dit
    assert {p.dtype for p in tiny_generator.dit.parameters()} == {
        torch.float32
    }  # the loaded model, as loaded


def test_int8_sessions_too_draw_what_they_drew_before_the_rest_was_held(
    torch_kernels_generator: Generator,
) -> None:
    tiny_generator = torch_kernels_generator
    reference = reference_chunk(np.array([2]))[0]
    unheld = with_linears(tiny_generator.dit, "int8")
    loaded = Session(tiny_generator, reference, 9, 1, "write_time", 8, 0.0, unheld)
    served = tiny_generator.open_session(reference=reference, seed=9, steps=1, linears="int8")
    for cond in SCRIPT:
        assert np.array_equal(served.step(cond), loaded.step(cond))
