"""How busy generator threads are (``BusyMeter``) and what a pool says more sessions would do (``load_of``)."""

from __future__ import annotations

import msgspec
import pytest

from streaming_model.backend import BackendManifest, Capabilities, Costs
from streaming_model.busy import BusyMeter
from streaming_model.manifest import build_manifest
from streaming_model.pool import ThreadLoad, load_of


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_the_meter_counts_busy_time_inside_its_window_and_work_still_in_progress() -> None:
    clock = Clock()
    meter = BusyMeter(window_s=2.0, clock=clock)
    assert meter.share() == 0.0
    with meter.busy():
        clock.t += 0.5
    clock.t += 0.5
    assert meter.share() == pytest.approx(0.25)
    with meter.busy():
        clock.t += 1.0
        assert meter.share() == pytest.approx(0.75)  # counted while it runs
    clock.t += 1.5  # the first span has left the window; the second half remains
    assert meter.busy_s() == pytest.approx(0.5)


MANIFEST = BackendManifest(
    name="test",
    vocabulary=build_manifest(),  # a chunk every 1/6 s
    first_chunk_frames=4,
    audio_rate=0,
    capabilities=Capabilities(
        rollback_depth=1, snapshots="exact", interrupt="block", deterministic=True, reference_image=False
    ),
    costs=Costs(
        chunk_p50_ms=30.0,
        chunk_p95_ms=35.0,
        finish_p50_ms=10.0,
        first_chunk_ms=50.0,
        interrupt_ms=1.0,
        batch_p50_ms=(40.0, 60.0, 80.0),
    ),
)
CHUNK_S = MANIFEST.vocabulary.chunk_s


def test_batched_costs_come_from_the_measured_sizes_and_grow_past_them_by_the_last_step() -> None:
    costs = MANIFEST.costs
    assert [costs.batch_ms(n) for n in range(5)] == [0.0, 40.0, 60.0, 80.0, 100.0]
    alone = msgspec.structs.replace(costs, batch_p50_ms=())
    assert [alone.batch_ms(n) for n in range(3)] == [0.0, 40.0, 80.0]  # chunk + finish, one after another


def test_a_pool_predicts_from_costs_and_measures_and_adds_newcomers_to_the_emptiest_thread() -> None:
    idle = [ThreadLoad(sessions=0, busy=0.0, batch=3, finish_s=0.002) for _ in range(2)]
    one = load_of(MANIFEST, idle, joining=1)
    assert one.after == pytest.approx((0.040 + 0.002) / CHUNK_S)
    three = load_of(MANIFEST, idle, joining=3)  # two on one thread, batched: 60 ms, not 80
    assert three.after == pytest.approx((0.060 + 2 * 0.002) / CHUNK_S)
    one_by_one = [msgspec.structs.replace(t, batch=1) for t in idle]
    assert load_of(MANIFEST, one_by_one, joining=3).after == pytest.approx((0.080 + 0.004) / CHUNK_S)
    # A thread that measures busier than its costs say counts what it measures; newcomers go to the
    # thread with the fewest sessions, the least busy of those.
    busy = [
        ThreadLoad(sessions=1, busy=0.3, batch=3, finish_s=0.0),
        ThreadLoad(sessions=1, busy=0.1, batch=3, finish_s=0.0),
    ]
    load = load_of(MANIFEST, busy, joining=1)
    assert load.busy == pytest.approx(0.2) and load.predicted == pytest.approx(0.040 / CHUNK_S)
    step = 0.020 / CHUNK_S  # the second session of a batch
    assert load.after == pytest.approx(0.040 / CHUNK_S + step)  # the idler thread, its costs above 0.1
    # on the busier thread a newcomer costs what the costs say, times what it measures over them
    assert load_of(MANIFEST, busy, joining=2).after == pytest.approx(0.3 + step * 0.3 / (0.040 / CHUNK_S))
    assert load_of(MANIFEST, busy, joining=0).after == pytest.approx(0.3)


def test_a_newcomer_costs_as_much_more_than_the_costs_say_as_the_threads_measure() -> None:
    alone = 0.040 / CHUNK_S  # one session's chunks by the costs
    threads = [
        ThreadLoad(sessions=1, busy=1.5 * alone, batch=3, finish_s=0.0),
        ThreadLoad(sessions=0, busy=0.0, batch=3, finish_s=0.0),
    ]
    load = load_of(MANIFEST, threads, joining=1)  # to the thread without sessions, at the other's ratio
    assert load.after == pytest.approx(1.5 * alone) and load.added == pytest.approx(1.5 * alone)
    both = load_of(MANIFEST, threads, joining=2)  # and the next to the measured one, at its own
    assert both.added == pytest.approx(1.5 * alone + 1.5 * 0.020 / CHUNK_S)
    assert load.ratio == pytest.approx(1.5)
    # Where no thread measures (their sessions just changed), the ratio they last measured holds, for
    # the sessions there and the newcomers alike.
    unmeasured = [msgspec.structs.replace(threads[0], busy=0.0), threads[1]]
    assert load_of(MANIFEST, unmeasured, joining=0, ratio=1.5).after == pytest.approx(1.5 * alone)
    two = load_of(MANIFEST, unmeasured, joining=2, ratio=1.5)  # both to the idle thread, batched
    assert two.after == pytest.approx(1.5 * 0.060 / CHUNK_S)
    assert load_of(MANIFEST, unmeasured, joining=0).after == pytest.approx(alone)  # none known: the costs
    # a thread measuring less than its costs does not make newcomers cheaper than the costs
    quiet = [msgspec.structs.replace(t, busy=0.5 * alone if t.sessions else 0.0) for t in threads]
    assert load_of(MANIFEST, quiet, joining=1).added == pytest.approx(alone)


def test_after_a_restart_the_meter_measures_from_it_and_reads_nothing_until_a_second_has_passed() -> None:
    clock = Clock()
    meter = BusyMeter(window_s=5.0, clock=clock)
    with meter.busy():  # an old load: busy throughout
        clock.t += 4.0
    meter.restart()  # a session left
    assert meter.share() == 0.0  # not known yet
    clock.t += 0.5
    assert meter.share() == 0.0
    with meter.busy():
        clock.t += 0.25
    clock.t += 0.75  # 1.5 s since the restart, 0.25 s of it busy
    assert meter.share() == pytest.approx(0.25 / 1.5)
    assert meter.busy_s() == pytest.approx(3.5 + 0.25)  # busy seconds over the whole window, as before


def test_a_thread_whose_sessions_all_left_counts_as_idle_though_its_window_still_shows_their_work() -> None:
    left = [ThreadLoad(sessions=0, busy=0.9, batch=3, finish_s=0.0) for _ in range(2)]
    load = load_of(MANIFEST, left, joining=1)
    assert load.busy == pytest.approx(0.9)  # measured, and said so
    assert load.after == pytest.approx(0.040 / CHUNK_S)  # but a newcomer adds only its own costs
