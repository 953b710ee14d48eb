"""The streaming runtime: determinism, interrupt, rollback, snapshot, write-time vs naive cache."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import numpy as np
import pytest
import torch

from streaming_model.condition import ChunkCondition, ConditionError
from streaming_model.kv_cache import RollbackError
from streaming_model.runtime import Generator, Session

TALK = ChunkCondition(action="wave", speaking=True, audio=(0.2, 0.9, 0.5, 0.1), emotion="happy")
SCRIPT = [ChunkCondition(action=a) for a in ("idle", "walk_left", "walk_left", "nod", "jump", "jump", "sit")]
SPEECH = [
    ChunkCondition(speaking=True, audio=tuple(float(v) for v in np.random.default_rng(i).uniform(0, 1, 4)))
    for i in range(6)
]


def run(session: Session, conds: list[ChunkCondition]) -> list[np.ndarray]:
    return [session.step(c) for c in conds]


def cache_tensors(session: Session) -> list[torch.Tensor]:
    """Everything committed: the int8 store and the committed parts of the attention view (the
    pending region in between is scratch space by design)."""
    st, t = session.cache.state, session.cache.T
    views = [
        v[..., sl, :].clone()
        for v in (session.cache.view_k, session.cache.view_v)
        for sl in (slice(0, t), slice(2 * t, None))
    ]
    return [st.k_q.clone(), st.k_s.clone(), st.v_q.clone(), st.v_s.clone(), st.slot_pos.clone(), *views]


def same(a: list, b: list) -> bool:
    return all(
        torch.equal(x, y) if isinstance(x, torch.Tensor) else np.array_equal(x, y)
        for x, y in zip(a, b, strict=True)
    )


def test_same_seed_and_conditions_give_bit_identical_frames(tiny_generator: Generator) -> None:
    a = run(tiny_generator.open_session(identity=1, seed=5), SCRIPT)
    b = run(tiny_generator.open_session(identity=1, seed=5), SCRIPT)
    c = run(tiny_generator.open_session(identity=1, seed=6), SCRIPT)
    assert same(a, b)
    assert not same(a, c)


def test_frames_are_four_uint8_rgb_frames(tiny_generator: Generator) -> None:
    frames = tiny_generator.open_session(identity=0).step(TALK)
    assert frames.shape == (4, 128, 128, 3) and frames.dtype == np.uint8


def test_an_interrupt_stops_within_one_denoise_step_and_leaves_the_cache_untouched(
    tiny_generator: Generator,
) -> None:
    s = tiny_generator.open_session(identity=2, seed=9, steps=8)
    run(s, SCRIPT[:3])
    s.settle()  # the third chunk into the cache now (not in the next pass): the passes below only generate
    before = cache_tensors(s)
    depth = s.dit.cfg.depth
    calls = {"n": 0, "at_cancel": -1}
    cancel = threading.Event()
    real_attend = s.cache.attend

    def counting_attend(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        calls["n"] += 1
        return real_attend(layer, q, k, v)

    def interrupt() -> None:  # from another thread, as a live event would arrive
        calls["at_cancel"] = calls["n"]
        cancel.set()

    s.cache.attend = counting_attend  # type: ignore[method-assign]  # a counting spy on the real one
    t0 = time.perf_counter()
    assert s.generate(TALK) is not None
    full_calls = calls["n"]
    step_s = (time.perf_counter() - t0) / 8
    calls["n"] = 0
    timer = threading.Timer(3.5 * step_s, interrupt)  # in the middle of the sampler's work
    timer.start()
    out = s.generate(TALK, cancel=cancel)
    timer.join()
    del s.cache.attend
    assert out is None
    assert 0 <= calls["at_cancel"] < full_calls
    assert calls["n"] - calls["at_cancel"] <= depth  # at most the rest of the step in flight
    assert same(before, cache_tensors(s))
    # The next chunk regenerated after the interrupt is the one an uninterrupted session makes.
    ref = tiny_generator.open_session(identity=2, seed=9, steps=8)
    run(ref, SCRIPT[:3])
    assert np.array_equal(s.step(TALK), ref.step(TALK))


def test_an_interrupt_set_before_generate_does_no_work(tiny_generator: Generator) -> None:
    s = tiny_generator.open_session(identity=2)
    cancel = threading.Event()
    cancel.set()
    assert s.generate(TALK, cancel=cancel) is None
    assert s.index == 0


def test_rollback_then_regenerate_reproduces_the_same_frames(tiny_generator: Generator) -> None:
    s = tiny_generator.open_session(identity=3, seed=4)
    first = run(s, SCRIPT)
    s.rollback(3)
    assert s.index == len(SCRIPT) - 3
    again = run(s, SCRIPT[-3:])
    assert same(first[-3:], again)


def test_rollback_through_speech_reproduces_the_mouth_that_reads_the_voice_before_it(
    tiny_generator: Generator,
) -> None:
    s = tiny_generator.open_session(identity=1, seed=5)
    first = run(s, SPEECH)
    s.rollback(3)
    assert same(first[-3:], run(s, SPEECH[-3:]))


def test_the_decoder_draws_each_frame_from_its_voice_and_the_voice_just_before(
    tiny_generator: Generator,
) -> None:
    s = tiny_generator.open_session(identity=1, seed=5)
    run(s, SPEECH[:2])
    pending = s.generate(SPEECH[2])
    assert pending is not None and len(pending.voice) == 2 + 4  # 3 taps: the 2 values before, then 4
    assert pending.voice[:2] == SPEECH[1].audio[-2:]
    frames = s.decode(pending)
    silent = s.decode(replace(pending, voice=(0.0,) * 6))
    other_tail = s.decode(replace(pending, voice=(1.0, 1.0, *pending.voice[2:])))
    assert not np.array_equal(frames, silent)
    assert not np.array_equal(frames[0], other_tail[0])  # the first frame reads the chunk before
    assert np.array_equal(frames[3], other_tail[3])  # the last one reads only its own chunk


def test_rollback_and_redirect_change_only_the_future(tiny_generator: Generator) -> None:
    s = tiny_generator.open_session(identity=3, seed=4)
    first = run(s, SCRIPT)
    s.rollback(2)
    other = run(s, [ChunkCondition(action="wave"), ChunkCondition(action="wave")])
    assert not same(first[-2:], other)
    fresh = tiny_generator.open_session(identity=3, seed=4)
    assert same(run(fresh, SCRIPT[:-2]), first[:-2])


def test_rollback_past_the_journal_is_an_error(tiny_generator: Generator) -> None:
    s = tiny_generator.open_session(identity=0, journal=3)
    run(s, SCRIPT[:5])
    with pytest.raises(RollbackError, match="journal holds the last 3"):
        s.rollback(4)
    s.rollback(3)  # exactly the journal is fine


def test_snapshot_restore_continues_exactly(tiny_generator: Generator) -> None:
    s = tiny_generator.open_session(identity=4, seed=2)
    run(s, SCRIPT[:3])
    snap = s.snapshot()
    after = run(s, SCRIPT[3:])
    run(s, [TALK, TALK])
    s.restore(snap)
    assert same(run(s, SCRIPT[3:]), after)


def test_snapshot_restore_keeps_the_voice_the_next_mouth_reads(tiny_generator: Generator) -> None:
    s = tiny_generator.open_session(identity=4, seed=2)
    run(s, SPEECH[:3])
    snap = s.snapshot()
    after = run(s, SPEECH[3:])
    run(s, [ChunkCondition(), ChunkCondition()])
    s.restore(snap)
    assert same(run(s, SPEECH[3:]), after)


def test_write_time_and_naive_caches_give_identical_frames_and_naive_costs_more(
    tiny_generator: Generator,
) -> None:
    conds = SCRIPT * 2
    fast = tiny_generator.open_session(identity=5, seed=1)
    slow = tiny_generator.open_session(identity=5, seed=1, cache_mode="naive")
    a, b = run(fast, conds[:8]), run(slow, conds[:8])
    assert same(a, b)  # no rebase yet: the same rotate/quantize on the same inputs
    assert slow.cache.maintenance_s > 2 * fast.cache.maintenance_s


def test_positions_are_rebased_and_stay_in_the_trained_range(tiny_generator: Generator) -> None:
    s = tiny_generator.open_session(identity=0)
    limit = s.dit.cfg.max_distance
    seen = []
    for _ in range(3 * limit):
        seen.append(s.cache.next_position())
        s.step(ChunkCondition(action="walk_right"))
    assert max(seen) <= limit and min(seen) >= 1
    assert seen.count(limit) >= 2  # it did reach the end of the range and came back


def test_condition_errors_name_the_problem(tiny_generator: Generator) -> None:
    s = tiny_generator.open_session(identity=0)
    with pytest.raises(ConditionError, match="unknown action 'moonwalk'"):
        s.generate(ChunkCondition(action="moonwalk"))
    with pytest.raises(ConditionError, match="audio must hold 4 values"):
        s.generate(ChunkCondition(audio=(0.1, 0.2)))
    with pytest.raises(ConditionError, match="target values must be finite"):
        s.generate(ChunkCondition(action="look_at", target=(3.0, 0.0)))
    with pytest.raises(ConditionError, match="unknown emotion"):
        s.generate(ChunkCondition(emotion="smug"))
    with pytest.raises(ConditionError, match="side must be one of"):
        s.generate(ChunkCondition(action="turn", side="up"))
    assert s.index == 0


def test_a_wrongly_shaped_reference_is_rejected(tiny_generator: Generator) -> None:
    with pytest.raises(ValueError, match="reference must be uint8"):
        tiny_generator.open_session(reference=np.zeros((64, 64, 3), np.uint8))
