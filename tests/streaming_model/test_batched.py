"""Sessions batched together (``runtime.generate_many``, ``commit_many``, ``decode_many``): each keeps its own
cache, seed and chunk index, gets the frames it gets alone, and leaves a batch on its own cancel."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from streaming_model.condition import ChunkCondition, ConditionError
from streaming_model.passes import commit_many, decode_many, generate_many
from streaming_model.precision import compute_dtype
from streaming_model.runtime import Generator, Session
from streaming_model.tiny import TinyBackend
from tests.support.kernels import alike, one_int8_scale_per_call, rows_independent

ACTIONS = ("idle", "wave", "walk_left", "nod", "jump", "turn", "sit", "startle")


def cond(i: int) -> ChunkCondition:
    return ChunkCondition(
        action=ACTIONS[i % len(ACTIONS)], speaking=i % 2 == 0, audio=(0.1, 0.6, 0.9, 0.3), target=(0.3, 0.0)
    )


def batch_step(sessions: list[Session], conds: list[ChunkCondition]) -> list[np.ndarray]:
    pendings = generate_many(sessions, conds, [None] * len(sessions))
    ready = [p for p in pendings if p is not None]
    assert len(ready) == len(sessions)
    commit_many(sessions, ready)
    return decode_many(sessions[0].codec, ready)


def twins(gen: Generator, n: int, **kw: object) -> tuple[list[Session], list[Session]]:
    def made() -> list[Session]:
        return [gen.open_session(identity=i % 4, seed=10 + i, **kw) for i in range(n)]  # type: ignore[arg-type]

    return made(), made()


@pytest.fixture(scope="module")
def shipped() -> Generator:
    torch.set_num_threads(1)
    return Generator.load()


def test_the_shipped_model_gives_each_session_its_own_frames_at_any_batch_size(shipped: Generator) -> None:
    # Sessions at different points of their lives share a batch: one fresh, one whose ring is full, one
    # past the cache's rebase (max_distance chunks), each with its own condition and voice.
    alone, batched = twins(shipped, 8)
    for k, (a, b) in enumerate(zip(alone, batched, strict=True)):
        for i in range((0, 2, 5, shipped.dit.cfg.max_distance + 1)[k % 4]):
            a.step(cond(i))
            b.step(cond(i))
    # Bit for bit where this machine's kernels give a row the same bits at the largest batch's rows (8
    # sessions of two chunks each, the pass that commits one and generates the next) as alone: bf16
    # without AMX does; elsewhere they may differ in their last bits, growing a little chunk by chunk,
    # never by what another session's picture would put there.
    exact = compute_dtype() == torch.bfloat16 and rows_independent(shipped.dit_for("float"), 8 * 2 * 64)
    for size in (8, 3, 1):
        for round_ in range(2):
            conds = [cond(round_ + 3 * i) for i in range(size)]
            expected = [s.step(c) for s, c in zip(alone[:size], conds, strict=True)]
            got = batch_step(batched[:size], conds)
            assert all(alike(e, g, exact) for e, g in zip(expected, got, strict=True))
    assert [s.index for s in alone] == [s.index for s in batched]


def test_a_session_cancelled_in_a_batch_gets_none_and_keeps_its_state(tiny_generator: Generator) -> None:
    alone, batched = twins(tiny_generator, 3)
    cancels: list[threading.Event | None] = [None, threading.Event(), None]
    cancels[1].set()  # type: ignore[union-attr]
    pendings = generate_many(batched, [cond(i) for i in range(3)], cancels)
    assert pendings[1] is None and pendings[0] is not None and pendings[2] is not None
    commit_many([batched[0], batched[2]], [pendings[0], pendings[2]])
    assert [s.index for s in batched] == [1, 0, 1]
    # The others' chunk is what it is alone; the cancelled session goes on as if it had never been asked.
    for i in (0, 2):
        assert torch.equal(alone[i].generate(cond(i)).latent, pendings[i].latent)  # type: ignore[union-attr]
    assert np.array_equal(alone[1].step(cond(7)), batch_step([batched[1]], [cond(7)])[0])


def test_a_batch_whose_every_session_is_cancelled_mid_pass_stops_between_blocks(
    tiny_generator: Generator,
) -> None:
    _, batched = twins(tiny_generator, 2)
    flags = [threading.Event(), threading.Event()]
    calls = 0
    inner = batched[1].cache.attend

    def attend(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        nonlocal calls
        calls += 1
        for flag in flags:
            flag.set()  # both set inside the first block: the pass must stop before the next
        return inner(layer, q, k, v)

    batched[1].cache.attend = attend  # type: ignore[method-assign]
    assert generate_many(batched, [cond(0), cond(1)], flags) == [None, None]
    assert calls == 1
    assert [s.index for s in batched] == [0, 0]


def test_what_cannot_share_a_batch_is_refused_before_anything_runs(tiny_generator: Generator) -> None:
    two_steps = tiny_generator.open_session(identity=0, seed=1, steps=2)
    one_step = tiny_generator.open_session(identity=0, seed=1, steps=1)
    with pytest.raises(ValueError, match="cannot share a batch"):
        generate_many([two_steps, one_step], [cond(0), cond(1)], [None, None])
    with pytest.raises(ValueError, match="one entry each"):
        generate_many([two_steps], [cond(0), cond(1)], [None])
    with pytest.raises(ConditionError):
        generate_many([two_steps, two_steps], [cond(0), ChunkCondition(target=(3.0, 0.0))], [None, None])


def test_a_commit_that_does_not_follow_its_session_commits_nothing(tiny_generator: Generator) -> None:
    _, batched = twins(tiny_generator, 2)
    stale = generate_many(batched, [cond(0), cond(1)], [None, None])
    batched[1].step(cond(2))  # session 1 moved on: its pending chunk no longer follows it
    with pytest.raises(ValueError, match="does not follow"):
        commit_many(batched, [p for p in stale if p is not None])
    assert [s.index for s in batched] == [0, 1]


def test_the_tiny_backend_declares_what_its_warm_up_found(
    tiny_generator: Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = TinyBackend(tiny_generator, warmup_chunks=2, max_batch=3)
    manifest = backend.manifest
    assert manifest.capabilities.batching in ("exact", "approximate")
    assert len(manifest.costs.batch_p50_ms) == 3 and all(ms > 0 for ms in manifest.costs.batch_p50_ms)
    # a larger batch never costs less than a smaller one, however a busy machine timed them
    assert list(manifest.costs.batch_p50_ms) == sorted(manifest.costs.batch_p50_ms)
    alone = TinyBackend(tiny_generator, warmup_chunks=2, max_batch=1).manifest
    assert alone.capabilities.batching == "none" and alone.costs.batch_p50_ms == ()
    # int8 quantises each chunk's activations with a scale of its own: its batches are as exact as the
    # float path's wherever the rest of the model gives a row the same bits in a batch
    int8 = TinyBackend(tiny_generator, warmup_chunks=1, linears="int8", max_batch=2).manifest
    if manifest.capabilities.batching == "exact":
        assert int8.capabilities.batching == "exact"
    # with one scale for a whole batch, a session's picture depends on the others': found out
    one_int8_scale_per_call(monkeypatch)
    shared = TinyBackend(tiny_generator, warmup_chunks=1, linears="int8", max_batch=2).manifest
    assert shared.capabilities.batching == "approximate"


def test_warm_up_times_batches_of_one_two_four_and_the_largest_and_draws_the_line_between(
    tiny_generator: Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    batches: list[int] = []
    generate_many = TinyBackend.generate_many

    def counted(self: TinyBackend, sessions: list, conds: list, cancels: list) -> list:
        batches.append(len(sessions))
        return generate_many(self, sessions, conds, cancels)

    monkeypatch.setattr(TinyBackend, "generate_many", counted)
    costs = TinyBackend(tiny_generator, warmup_chunks=1, max_batch=5).manifest.costs
    # twice the largest batch against its twins one by one (exactness), then three timed rounds of each size
    assert sorted(batches) == [1] * 3 + [2] * 3 + [4] * 3 + [5] * 5
    one, two, three, four, five = costs.batch_p50_ms
    assert one <= two <= four <= five
    assert three == pytest.approx((two + four) / 2, abs=0.051)  # on the line, to its 0.1 ms rounding
