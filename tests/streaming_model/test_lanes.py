"""Lanes: model workers that serve several sessions on one thread, batching the chunks that wait together.

The batches are made to happen, not hoped for: a first chunk's ``finish`` holds the lane's thread until the
other sessions' chunks are queued, so they are what the thread finds when it comes free."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Awaitable

import numpy as np
import pytest
import torch

from streaming_model.condition import ChunkCondition, ConditionError
from streaming_model.lanes import Lanes, LaneWorker
from streaming_model.pool import ThreadLoad, load_of, median_s
from streaming_model.runtime import Generator
from streaming_model.tiny import TinyBackend
from streaming_model.worker import Cancel
from streaming_model.world_backend import WorldBackend
from tests.support.kernels import alike

ACTIONS = ("wave", "nod", "jump", "walk_left", "sit")


def cond(i: int) -> ChunkCondition:
    return ChunkCondition(action=ACTIONS[i % len(ACTIONS)], speaking=True, audio=(0.2, 0.8, 0.5, 0.1))


def keep(frames: np.ndarray) -> np.ndarray:
    return frames.copy()


@pytest.fixture(scope="module")
def shipped() -> TinyBackend:
    torch.set_num_threads(1)
    return TinyBackend(Generator.load(), warmup_chunks=2, max_batch=4)


@pytest.fixture
async def one_lane(shipped: TinyBackend) -> AsyncIterator[Lanes]:
    lanes = Lanes(shipped, lanes=1, max_batch=8)
    yield lanes
    await lanes.close()


async def held_while(worker: LaneWorker, queued: list[Awaitable[object]]) -> list[object]:
    """Hold ``worker``'s lane in a chunk's finish while ``queued`` calls are made; then let it go: what the
    lane finds queued is one batch. Returns their results (exceptions included)."""
    entered, release = threading.Event(), threading.Event()

    def hold(frames: np.ndarray) -> np.ndarray:
        entered.set()
        release.wait(30)
        return frames

    holding = asyncio.ensure_future(worker.produce(cond(9), Cancel(), hold))
    await asyncio.to_thread(entered.wait, 30)
    calls = [asyncio.ensure_future(q) for q in queued]
    for _ in range(3):  # each call runs up to its wait for the lane: its job is queued
        await asyncio.sleep(0)
    release.set()
    await holding
    return list(await asyncio.gather(*calls, return_exceptions=True))


async def test_chunks_waiting_together_are_one_batch_and_each_session_gets_its_lone_frames(
    shipped: TinyBackend, one_lane: Lanes
) -> None:
    # Bit for bit where the warm-up found batches exact on this machine (bf16 without AMX), else in the
    # last bits only (tests/support/kernels.py).
    exact = shipped.manifest.capabilities.batching == "exact"
    workers = [await one_lane.open(identity=i, seed=20 + i, name=f"s{i}") for i in range(4)]
    got = await held_while(
        workers[0], [w.produce(cond(i), Cancel(), keep) for i, w in enumerate(workers[1:])]
    )
    assert list(one_lane.lanes[0].batches)[-1] == 3
    second = await held_while(
        workers[0], [w.produce(cond(i + 1), Cancel(), keep) for i, w in enumerate(workers[1:])]
    )
    for i, worker in enumerate(workers[1:]):
        alone = shipped.open_session(identity=i + 1, seed=21 + i)
        for n, frames in ((0, got[i]), (1, second[i])):
            pending = alone.generate(cond(i + n))
            assert pending is not None and isinstance(frames, np.ndarray)
            assert alike(alone.decode(pending), frames, exact)
            alone.commit(pending)
        await worker.close()
    await workers[0].close()
    assert not one_lane.lanes[0].workers


async def test_a_session_cancelled_in_a_batch_commits_nothing_and_a_refused_condition_fails_alone(
    one_lane: Lanes,
) -> None:
    workers = [await one_lane.open(identity=0, seed=i, name=f"s{i}") for i in range(4)]
    cancelled = Cancel()
    cancelled.set()
    bad = ChunkCondition(action="wave", target=(5.0, 0.0))
    got = await held_while(
        workers[0],
        [
            workers[1].produce(cond(1), cancelled, keep),
            workers[2].produce(bad, Cancel(), keep),
            workers[3].produce(cond(3), Cancel(), keep),
        ],
    )
    assert got[0] is None and isinstance(got[1], ConditionError) and isinstance(got[2], np.ndarray)
    assert [(await w.capture()).index for w in workers] == [1, 0, 0, 1]
    for worker in workers:
        await worker.close()


async def test_a_sessions_calls_keep_their_order_between_batches(one_lane: Lanes) -> None:
    worker = await one_lane.open(identity=1, seed=5, name="a")
    other = await one_lane.open(identity=2, seed=6, name="b")
    first = await worker.produce(cond(0), Cancel(), keep)
    state = await worker.capture()
    # Queued behind a held lane, in this order: a chunk, a restore to before it, a chunk again.
    again = await held_while(
        other,
        [
            worker.produce(cond(1), Cancel(), keep),
            worker.restore_state(state),
            worker.produce(cond(1), Cancel(), keep),
            worker.replace(cond(2), Cancel(), keep),
        ],
    )
    assert np.array_equal(again[0], again[2])  # type: ignore[arg-type]
    assert not np.array_equal(again[2], again[3])  # type: ignore[arg-type]
    assert (await worker.capture()).index == 2
    assert first is not None
    await worker.close()
    await other.close()


async def test_sessions_spread_over_the_lanes_and_a_backend_that_does_not_batch_runs_alone(
    tiny_generator: Generator,
) -> None:
    lanes = Lanes(WorldBackend(warmup_chunks=1), lanes=2, max_batch=8)
    try:
        assert [lane.max_batch for lane in lanes.lanes] == [1, 1]
        workers = [await lanes.open(identity=0, seed=i, name=str(i)) for i in range(3)]
        assert sorted(len(lane.workers) for lane in lanes.lanes) == [1, 2]
        await asyncio.gather(*(w.produce(cond(0), Cancel(), keep) for w in workers))
        assert set(lanes.lanes[0].batches) | set(lanes.lanes[1].batches) == {1}
        assert lanes.load().sessions == 3
        await workers[0].close()
        await workers[0].close()  # idempotent
        assert lanes.load().sessions == 2
        for worker in workers[1:]:
            await worker.close()
    finally:
        await lanes.close()
    batching = TinyBackend(tiny_generator, warmup_chunks=1, max_batch=2)
    lanes = Lanes(batching, lanes=1, max_batch=1)  # batching turned off by the pool
    assert lanes.lanes[0].max_batch == 1
    await lanes.close()


async def test_a_session_opens_beside_its_lane_so_the_lanes_chunks_never_wait_for_its_prefill(
    one_lane: Lanes,
) -> None:
    first = await one_lane.open(identity=0, seed=1, name="first")
    release = threading.Event()
    held = first.call(lambda: release.wait(60))  # the lane's thread is busy (as with a long chunk)
    try:
        # The newcomer opens and prefills meanwhile: its opening does not queue behind the lane's work.
        second = await asyncio.wait_for(one_lane.open(identity=1, seed=2, name="second"), 60)
        assert not held.done()
    finally:
        release.set()
    assert held.result(60) is True
    assert await second.produce(cond(1), Cancel(), keep) is not None
    for worker in (first, second):
        await worker.close()


async def test_a_lane_measures_afresh_when_its_sessions_change_and_remembers_what_live_chunks_cost(
    one_lane: Lanes,
) -> None:
    worker = await one_lane.open(identity=1, seed=5, name="a")
    began = time.monotonic()
    while time.monotonic() - began < 1.5:  # chunks back to back: the lane rests only between them
        await worker.produce(cond(0), Cancel(), keep)
    running = one_lane.load(0)
    assert running.busy > 0.0  # measured since the session joined
    assert running.ratio == pytest.approx(running.busy / running.predicted)  # live over the costs
    await worker.close()
    lane = one_lane.lanes[0]
    left = one_lane.load(1)
    # The session gone, nothing measures now; a newcomer is priced at the costs times what the lane last
    # measured over them.
    by_costs = load_of(
        one_lane.manifest, [ThreadLoad(sessions=0, busy=0.0, batch=8, finish_s=median_s(lane.finish_s))], 1
    )
    assert left.ratio == running.ratio
    assert left.after == pytest.approx(by_costs.after * max(1.0, running.ratio))
