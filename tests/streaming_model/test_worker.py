"""The model worker keeps every call into a backend off the event loop, in order, and cancellable."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from streaming_model.condition import ChunkCondition
from streaming_model.kv_cache import SnapshotError
from streaming_model.pool import LocalWorkers
from streaming_model.runtime import Generator
from streaming_model.tiny import TinyBackend
from streaming_model.worker import Cancel, ModelWorker
from streaming_model.world_backend import WorldBackend
from tests.support.backends import Recording


def frames_of(frames: np.ndarray) -> np.ndarray:
    return frames.copy()


async def test_the_worker_produces_a_direct_sessions_frames(tiny_generator: Generator) -> None:
    backend = TinyBackend(tiny_generator, warmup_chunks=1)
    worker = ModelWorker(backend, identity=1, seed=3)
    try:
        got = [
            await worker.produce(ChunkCondition(action=a), threading.Event(), frames_of)
            for a in ("idle", "wave")
        ]
        assert len(worker.finish_times) == 2
    finally:
        await worker.close()
    direct = backend.open_session(identity=1, seed=3)
    for action, frames in zip(("idle", "wave"), got, strict=True):
        pending = direct.generate(ChunkCondition(action=action))
        assert pending is not None and frames is not None
        assert np.array_equal(direct.decode(pending), frames)
        direct.commit(pending)


async def test_every_backend_call_runs_on_the_worker_thread_never_the_loops() -> None:
    backend = Recording(WorldBackend(warmup_chunks=1))
    worker = ModelWorker(backend, identity=0, seed=1)
    cond = ChunkCondition(action="wave")
    try:
        await worker.produce(cond, threading.Event(), frames_of)
        blob = await worker.capture()
        await worker.produce(cond, threading.Event(), frames_of)
        await worker.replace(ChunkCondition(action="nod"), threading.Event(), frames_of)
        await worker.restore_state(blob)
        await worker.restore(await worker.snapshot())
        await worker.rollback(0)
    finally:
        await worker.close()
    names = {name for name, _ in backend.calls}
    assert names >= {"open_session", "generate", "commit", "snapshot", "export_state", "rollback", "restore"}
    assert names >= {"import_state", "close"}
    loop_thread = threading.current_thread().name
    assert {thread for _, thread in backend.calls} == {backend.calls[0][1]} != {loop_thread}


async def test_a_cancelled_chunk_commits_nothing_and_a_cancelled_replacement_restores_the_last() -> None:
    worker = ModelWorker(WorldBackend(warmup_chunks=1), identity=0)
    try:
        first = await worker.produce(ChunkCondition(action="wave"), threading.Event(), frames_of)
        cancelled = threading.Event()
        cancelled.set()
        assert await worker.produce(ChunkCondition(action="jump"), cancelled, frames_of) is None
        assert worker.index == 1
        assert await worker.replace(ChunkCondition(action="jump"), cancelled, frames_of) is None
        assert worker.index == 1
        # The first chunk stands: the next one continues from it as a direct session's does.
        second = await worker.produce(ChunkCondition(action="nod"), threading.Event(), frames_of)
    finally:
        await worker.close()
    direct = WorldBackend(warmup_chunks=1).open_session(identity=0)
    for frames, action in ((first, "wave"), (second, "nod")):
        pending = direct.generate(ChunkCondition(action=action))
        assert pending is not None and frames is not None
        assert np.array_equal(direct.decode(pending), frames)
        direct.commit(pending)


async def test_an_unknown_action_degrades_in_the_worker_and_a_foreign_state_is_refused() -> None:
    backend = WorldBackend(warmup_chunks=1)
    worker = ModelWorker(backend, identity=0)
    direct = backend.open_session(identity=0)
    try:
        got = await worker.produce(ChunkCondition(action="moonwalk"), threading.Event(), frames_of)
        pending = direct.generate(ChunkCondition(action="idle"))
        assert pending is not None and got is not None and np.array_equal(got, direct.decode(pending))
        with pytest.raises(SnapshotError):
            await worker.restore_state(b"\x80\x04 a pickle")
        with pytest.raises(SnapshotError):
            await worker.restore_state(object())
        assert worker.index == 1
    finally:
        await worker.close()


async def test_opening_a_session_does_not_hold_the_loop(tiny_generator: Generator) -> None:
    """Opening a session (its prefill) runs in the worker's thread: the constructor returns while the
    backend is still opening, and the loop goes on."""
    hold = threading.Event()
    backend = Recording(TinyBackend(tiny_generator, warmup_chunks=1), hold=hold)
    worker = ModelWorker(backend, identity=0)
    try:
        assert not hold.is_set()
        for _ in range(1000):  # the worker thread starts opening
            if backend.calls:
                break
            await asyncio.sleep(0.01)
        assert backend.calls == [("open_session", backend.calls[0][1])]
        assert backend.calls[0][1] != threading.current_thread().name
        hold.set()
        await asyncio.wait_for(worker.ready(), 30)
        assert worker.index == 0
    finally:
        hold.set()
        await worker.close()


async def test_a_paused_session_is_not_in_the_pools_load_until_it_goes_on(tiny_generator: Generator) -> None:
    pool = LocalWorkers(TinyBackend(tiny_generator, warmup_chunks=1), cores=1)
    workers = [await pool.open(identity=0, seed=i, name=str(i)) for i in range(2)]
    try:
        for worker in workers:
            await worker.produce(ChunkCondition(action="idle"), Cancel(), frames_of)
        both = pool.load(0)
        assert both.sessions == 2
        workers[1].paused = True  # its client went away
        alone = pool.load(0)
        assert alone.sessions == 1 and alone.predicted < both.predicted
        workers[1].paused = False
        assert pool.load(0).sessions == 2
    finally:
        for worker in workers:
            await worker.close()
