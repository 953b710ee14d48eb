"""The session worker keeps torch off the event loop and can be interrupted from it."""

from __future__ import annotations

import asyncio

import numpy as np

from streaming_model.condition import ChunkCondition
from streaming_model.runtime import Generator
from streaming_model.worker import SessionWorker


async def test_worker_generates_the_same_frames_as_a_direct_session(tiny_generator: Generator) -> None:
    worker = SessionWorker(tiny_generator, threads=1, identity=1, seed=3)
    try:
        frames = []
        for action in ("idle", "wave", "jump"):
            pending = await worker.generate(ChunkCondition(action=action))
            assert pending is not None
            frames.append(await worker.commit(pending))
    finally:
        worker.close()
    direct = tiny_generator.open_session(identity=1, seed=3)
    for action, got in zip(("idle", "wave", "jump"), frames, strict=True):
        assert np.array_equal(direct.step(ChunkCondition(action=action)), got)


async def test_interrupt_from_the_loop_cancels_the_chunk_in_flight(tiny_generator: Generator) -> None:
    worker = SessionWorker(tiny_generator, threads=1, identity=1, seed=3, steps=256)
    try:
        task = asyncio.ensure_future(worker.generate(ChunkCondition(action="wave")))
        await asyncio.sleep(0.05)  # the loop stays responsive while the worker denoises
        worker.interrupt()
        assert await task is None
        assert worker.index == 0
        pending = await worker.generate(ChunkCondition(action="wave"))  # a later chunk is not cancelled
        assert pending is not None
    finally:
        worker.close()
