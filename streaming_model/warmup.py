"""A backend's costs, measured at warm-up on a throwaway session: what its manifest declares."""

from __future__ import annotations

import threading
import time

from .backend import BackendSession, Costs, percentile_ms
from .condition import ChunkCondition

WARMUP_ACTIONS = ("idle", "wave", "walk_right", "nod")
"""The chunks timed at warm-up (cycled): a mix of still and moving actions."""


def measure_costs(session: BackendSession, chunks: int = 4, audio_frames: int = 4) -> Costs:
    """Generate and commit ``chunks`` chunks (plus the first), then one interrupted chunk, and time them.

    The interrupt is set half a typical chunk into a generation; a generation that ends before it counts
    its whole remaining time (an upper bound). ``audio_frames``: the session's frames per chunk."""
    audio = (0.0,) * audio_frames
    generate_s: list[float] = []
    finish_s: list[float] = []
    first_s = 0.0
    for i in range(chunks + 1):
        cond = ChunkCondition(action=WARMUP_ACTIONS[i % len(WARMUP_ACTIONS)], audio=audio)
        began = time.perf_counter()
        pending = session.generate(cond)
        denoised = time.perf_counter()
        assert pending is not None  # nothing cancels it
        session.commit(pending)
        done = time.perf_counter()
        if i == 0:
            first_s = done - began  # a fresh session's first pass runs longer than later ones
            continue
        generate_s.append(denoised - began)
        finish_s.append(done - denoised)
    cancel = threading.Event()
    set_at: list[float] = []

    def interrupt() -> None:
        set_at.append(time.perf_counter())
        cancel.set()

    timer = threading.Timer(sorted(generate_s)[len(generate_s) // 2] / 2, interrupt)
    timer.start()
    session.generate(ChunkCondition(action="jump", audio=audio), cancel)
    returned = time.perf_counter()
    timer.cancel()
    timer.join()
    interrupt_s = returned - set_at[0] if set_at else 0.0
    return Costs(
        chunk_p50_ms=percentile_ms(generate_s, 50),
        chunk_p95_ms=percentile_ms(generate_s, 95),
        finish_p50_ms=percentile_ms(finish_s, 50),
        first_chunk_ms=round(1000.0 * first_s, 1),
        interrupt_ms=round(1000.0 * max(interrupt_s, 0.0), 1),
    )
