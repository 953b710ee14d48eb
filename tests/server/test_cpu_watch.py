"""Where the server's CPU went: a busy thread shows under its kind (niced ones apart), the machine's share
beside it, and a late chunk's warning carries it."""

from __future__ import annotations

import asyncio
import re
import resource
import sys
import threading
import time
from pathlib import Path

import pytest

from events.priority import lower_this_thread
from server import cpu_watch
from server.cpu_watch import CostMemory, CpuWatch, Reading, ThreadTotals, session_cost, shares, thread_kind
from tests.support.serving import until

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")


def test_thread_kinds_drop_pool_numbers_and_session_names() -> None:
    assert thread_kind("gen-ab12_0") == "gen"
    assert thread_kind("voice-first_0") == "voice-first"
    assert thread_kind("transcriber_0") == "transcriber"
    assert thread_kind("ears-mic") == "ears"
    assert thread_kind("ThreadPoolExecutor-3_1") == "executor"
    assert thread_kind("MainThread") == "loop"


def test_shares_split_the_machine_into_this_process_and_the_others() -> None:
    before = Reading(
        at=10.0, threads={1: (5.0, 1.0, 0), 2: (1.0, 0.0, 10)}, process_s=6.0, busy_s=100.0, steal_s=3.0
    )
    after = Reading(
        at=12.0,
        threads={1: (6.0, 1.2, 0), 2: (1.5, 0.1, 10), 3: (0.4, 0.0, 0)},
        process_s=7.9,
        busy_s=103.0,
        steal_s=3.2,
    )
    span, kinds, machine = shares(before, after, {1: "gen-a_0", 2: "voice_0"})
    assert span == pytest.approx(2.0)
    # thread 3 is nobody's Python thread: a library's own
    assert kinds.keys() == {"gen", "voice nice 10", "native"}
    assert kinds["gen"] == pytest.approx((0.5, 0.1))
    assert kinds["voice nice 10"] == pytest.approx((0.25, 0.05))
    assert kinds["native"] == pytest.approx((0.2, 0.0))
    assert machine["busy"] == pytest.approx(1.5)
    assert machine["other processes"] == pytest.approx(1.5 - 0.95)
    assert machine["steal"] == pytest.approx(0.1)


def spin(name: str, stop: threading.Event, ran: dict[str, float], niceness: int = 0) -> threading.Thread:
    """A thread that spins until ``stop``, keeping in ``ran[name]`` the CPU seconds it has had so far."""

    def run() -> None:
        if niceness:
            lower_this_thread(niceness)
        while not stop.is_set():
            ran[name] = time.thread_time()

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread


async def test_a_busy_thread_shows_under_its_kind_and_a_niced_one_with_its_nice_value() -> None:
    # One reading at the start and none after (a long period): the note then covers all the spinning,
    # however long a loaded machine takes to give the threads their CPU.
    watch = CpuWatch(every_s=600)
    watch.start()
    while not watch.note():  # noqa: ASYNC110 (the watch takes its first reading in its own task)
        await asyncio.sleep(0.01)
    stop = threading.Event()
    ran: dict[str, float] = {}
    threads = [spin("gen-ab12_0", stop, ran), spin("voice_0", stop, ran, niceness=5)]
    try:
        while ran.get("gen-ab12_0", 0.0) < 0.2 or ran.get("voice_0", 0.0) < 0.05:  # noqa: ASYNC110 (threads)
            await asyncio.sleep(0.05)
        gen_ran_s = ran["gen-ab12_0"]
        note = watch.note()
    finally:
        stop.set()
        await watch.stop()
        for thread in threads:
            thread.join()
    assert note.startswith("over the last ")
    span_s = float(note.removeprefix("over the last ").split(" s,")[0]) + 0.05  # shown to a tenth
    shown = note.split("in cores: ")[1].split(";")[0]
    kinds = {kind: float(run) for kind, run in re.findall(r"(?:^|, )([a-z][a-z0-9 ]*?) (\d+\.\d+)", shown)}
    # at least the CPU the spinning thread had had before the note, spread over the note's span
    assert kinds["gen"] >= gen_ran_s / span_s - 0.01
    assert "voice nice 5" in kinds and "voice" not in kinds
    assert "machine busy " in note and " steal " in note


async def test_the_note_is_empty_before_the_first_reading() -> None:
    assert CpuWatch().note() == ""


BURN = "import time\nwhile time.process_time() < 0.4:\n    pass\n"
"""A process that runs until it has had 0.4 s of CPU."""


def children_cpu_s() -> float:
    """CPU seconds of this process's children that ended, so far."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


async def test_the_machines_load_counts_another_process_and_this_ones_share_apart() -> None:
    # One reading at the start and a window longer than the test: the load covers all that follows.
    watch = CpuWatch(every_s=600, window_s=600)
    assert watch.machine() is None  # no reading yet
    watch.start()
    while watch.machine() is None:  # noqa: ASYNC110 (the watch takes its first reading in its own task)
        await asyncio.sleep(0.05)
    try:
        before = children_cpu_s()
        burner = await asyncio.create_subprocess_exec(sys.executable, "-c", BURN)
        await burner.wait()
        load = watch.machine()
    finally:
        await watch.stop()
    assert load is not None
    burned = children_cpu_s() - before
    # every process's CPU counted: the other process's at least (ticks of 10 ms)
    assert load.busy * load.window_s >= burned - 0.05 and burned >= 0.4
    # this process's share apart, and not the other process's
    assert 0.0 <= load.process * load.window_s < load.busy * load.window_s - 0.3
    assert load.cores >= 1


def reading(at: float, threads: dict[int, tuple[float, float, int]]) -> Reading:
    return Reading(at=at, threads=threads, process_s=0.0, busy_s=0.0, steal_s=0.0)


def test_totals_keep_the_times_of_threads_that_ended_and_count_a_reused_id_as_a_new_thread() -> None:
    totals = ThreadTotals()
    names = {1: "gen-a_0", 2: "gen-b_0", 3: "voice_0"}
    totals.take(reading(0.0, {1: (2.0, 0.5, 0), 2: (1.0, 0.1, 0), 3: (0.3, 0.0, 10)}), names)
    totals.take(reading(0.5, {1: (2.2, 0.6, 0), 3: (0.4, 0.0, 10), 9: (0.1, 0.0, 0)}), names)  # 2 ended
    kinds = totals.by_kind()
    assert kinds.keys() == {"gen", "voice", "native"}
    assert kinds["gen"] == pytest.approx((2.2 + 1.0, 0.6 + 0.1))
    assert kinds["voice"] == pytest.approx((0.4, 0.0))
    assert kinds["native"] == pytest.approx((0.1, 0.0))
    # Thread 1 ended and a new thread took its id: its times start again from zero.
    totals.take(
        reading(1.0, {1: (0.05, 0.0, 0), 3: (0.4, 0.0, 10)}), {1: "loop-stall-reporter", 3: "voice_0"}
    )
    run_s, wait_s = totals.by_kind()["gen"]
    assert (run_s, wait_s) == pytest.approx((3.2, 0.7))  # never less than before: a counter
    assert totals.by_kind()["loop-stall-reporter"] == pytest.approx((0.05, 0.0))


def test_a_thread_that_ends_while_it_is_read_is_left_out_and_the_reading_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What /proc shows for an instant: one thread alive, one exiting (its stat reads empty), one gone (its
    # directory listed, its files not there any more). A copy of the real files, then the exiting ones.
    (tmp_path / "stat").write_text(Path("/proc/stat").read_text())
    me = tmp_path / "self"
    (me / "task").mkdir(parents=True)
    (me / "stat").write_text(Path("/proc/self/stat").read_text())
    tid = threading.get_native_id()
    alive = me / "task" / str(tid)
    alive.mkdir()
    for name in ("stat", "schedstat"):
        (alive / name).write_text(Path(f"/proc/self/task/{tid}/{name}").read_text())
    exiting = me / "task" / "2"
    exiting.mkdir()
    (exiting / "stat").write_text("")
    (me / "task" / "3").mkdir()
    monkeypatch.setattr(cpu_watch, "PROC", tmp_path)
    reading = cpu_watch.read()
    assert reading is not None and set(reading.threads) == {tid}


async def test_a_window_whose_sessions_held_still_prices_them_and_one_whose_count_changed_does_not() -> None:
    counts = iter(range(10**6))
    sessions = [0]
    watch = CpuWatch(every_s=0.05, window_s=0.3, sessions=lambda: sessions[0] or next(counts))
    watch.start()
    ran: dict[str, float] = {}
    stop = threading.Event()
    try:
        # The number of sessions changes at every reading: no window prices them, busy or not.
        spinner = spin("lane-0", stop, ran)
        await until(lambda: ran.get("lane-0", 0.0) > 0.3, timeout=20)
        assert watch.session_cores() is None
        # Two sessions all through a window: this process's CPU over it, per session. However little of a
        # core a loaded machine leaves the spinner, the price follows what this process really had.
        sessions[0] = 2
        await until(lambda: watch.session_cores() is not None, timeout=20)
        cpu, at, spun = time.process_time(), time.monotonic(), ran["lane-0"]
        await until(lambda: ran["lane-0"] > spun + 0.5, timeout=60)
        had = (time.process_time() - cpu) / (time.monotonic() - at)
        assert (watch.session_cores() or 0.0) > 0.4 * had / 2
        stop.set()
        await asyncio.to_thread(spinner.join)
    finally:
        stop.set()
        await watch.stop()


def test_a_window_costs_the_process_cpu_per_session_only_where_its_sessions_held_still() -> None:
    times = [(10.0, 0.0, 4.0, 2), (10.2, 0.0, 4.1, 2), (10.5, 0.0, 4.6, 2)]  # 0.6 s of CPU in 0.5 s
    assert session_cost(times, window_s=0.5) == pytest.approx(0.6)
    assert session_cost(times, window_s=0.6) is None  # too short a window
    assert session_cost([*times[:2], (10.5, 0.0, 4.6, 3)], window_s=0.5) is None  # one joined
    assert session_cost([(t[0], t[1], t[2], 0) for t in times], window_s=0.5) is None  # nobody to price


def test_what_a_session_cost_is_remembered_through_idle_windows_and_forgotten_past_the_memory() -> None:
    memory = CostMemory(memory_s=10.0)
    assert memory.price() is None
    for at in range(5):  # busy windows
        memory.note(at, 0.5)
    for at in range(5, 9):  # idle ones, and some that priced nothing
        memory.note(at, 0.0)
        memory.note(at + 0.5, None)
    assert memory.price() == 0.5  # nine windows in ten cost no more than a busy one did
    memory.note(16.0, 0.0)  # the busy windows are more than 10 s old now
    assert memory.price() == 0.0
    memory.note(100.0, None)  # nothing priced for long: the newest window still stands
    assert memory.price() == 0.0
