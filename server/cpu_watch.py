"""Where the server's CPU went in the last second, by kind of thread, and how busy the machine was.

A chunk is late when its generator thread did not get a core in time. Which other thread had it (another
session's generator, the voice, the listeners, a library's own pool) or whether another process or the
hypervisor did, is what a late chunk's warning needs to say for a reader to act on it: ``CpuWatch.note``
says it. Linux only (``/proc``); elsewhere the note is empty.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import re
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import msgspec

from server.loop_watch import OnLoop
from streaming_model.busy import WINDOW_S

EVERY_S = 0.5
"""How often a reading is kept: a note covers the time since the older of the last two (0.5-1 s)."""
MEMORY_S = 300.0
"""How long what a session measurably cost is remembered (``CpuWatch.session_cores``): a talking session
shows its transcription and voice only while it talks, and a newcomer is judged by what sessions took."""
COST_QUANTILE = 0.9
"""Which of the remembered windows' costs a session is priced at: nine in ten cost no more. A talking
session's windows ranged 0.49-0.76 cores here, a gesture session's 0.40-0.52 (BENCHMARKS.md, "Twenty-sixth
session"); the highest alone let one outlying window refuse what the machine keeps."""
PROC = Path("/proc")
_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01


class Reading(msgspec.Struct, frozen=True):
    """CPU time so far: each of this process's threads' (seconds run, seconds waited runnable on a run
    queue, and its nice value), the process's and the machine's (busy and stolen, summed over cores), at
    ``at`` (monotonic seconds)."""

    at: float
    threads: dict[int, tuple[float, float, int]]
    process_s: float
    busy_s: float
    steal_s: float


def machine_times() -> tuple[float, float]:
    """The whole machine's busy and stolen CPU seconds so far, summed over cores (``OSError`` without
    ``/proc``)."""
    ticks = [int(x) for x in (PROC / "stat").read_text().split("\n", 1)[0].split()[1:]]
    # user nice system idle iowait irq softirq steal ...: idle and iowait are not busy; steal is nobody's here
    steal = ticks[7] if len(ticks) > 7 else 0
    return (sum(ticks) - ticks[3] - ticks[4] - steal) * _TICK_S, steal * _TICK_S


def process_s() -> float:
    """This process's CPU seconds so far, user and system (``OSError`` without ``/proc``)."""
    process = _fields((PROC / "self" / "stat").read_text())
    return (int(process[11]) + int(process[12])) * _TICK_S


def read() -> Reading | None:
    """The CPU times now, or None where ``/proc`` does not tell them."""
    try:
        busy_s, steal_s = machine_times()
        process = process_s()
    except OSError:
        return None
    threads = {}
    for task in (PROC / "self" / "task").iterdir():
        # A thread that ended meanwhile: its files are gone, or read empty while it exits.
        with contextlib.suppress(OSError, ValueError, IndexError):
            nice = int(_fields((task / "stat").read_text())[16])
            # the scheduler's own nanoseconds (run, waited while runnable): finer than stat's ticks
            run_ns, wait_ns = (int(x) for x in (task / "schedstat").read_text().split()[:2])
            threads[int(task.name)] = (run_ns / 1e9, wait_ns / 1e9, nice)
    return Reading(
        at=time.monotonic(),
        threads=threads,
        process_s=process,
        busy_s=busy_s,
        steal_s=steal_s,
    )


def _fields(stat: str) -> list[str]:
    """A ``/proc/.../stat`` line's fields after the command name (which may hold spaces), state first."""
    _, closing, fields = stat.rpartition(")")
    if not closing:
        raise ValueError(f"not a stat line: {stat!r}")
    return fields.split()


_PER_SESSION = re.compile(r"^(gen|lane|ears|ThreadPoolExecutor)-.*")


def thread_kind(name: str) -> str:
    """A Python thread's kind from its name: a pool's worker number and a session's name dropped
    (``gen-ab12_0`` -> ``gen``), the main thread (which runs the event loop) as ``loop``."""
    if name == "MainThread":
        return "loop"
    return _PER_SESSION.sub(r"\1", re.sub(r"_\d+$", "", name)).replace("ThreadPoolExecutor", "executor")


def kind_of(tid: int, names: dict[int, str]) -> str:
    """The kind of thread ``tid``: its Python name's (``names``), or ``native`` for a library's own."""
    return thread_kind(names[tid]) if tid in names else "native"


def shares(
    before: Reading, after: Reading, names: dict[int, str]
) -> tuple[float, dict[str, tuple[float, float]], dict[str, float]]:
    """Cores used between two readings by thread kind (``names``: native thread id -> Python name; others
    are a library's own threads, ``native``), each with `` nice N`` when it runs niced, as (run, waited
    runnable for a core); and the machine's ``busy`` (of ``cores``), ``other processes`` and ``steal``.
    Returns (seconds between, by kind, machine)."""
    span = after.at - before.at
    kinds: dict[str, tuple[float, float]] = {}
    for tid, (run_s, wait_s, nice) in after.threads.items():
        was = before.threads.get(tid, (0.0, 0.0, 0))
        run, wait = (run_s - was[0]) / span, (wait_s - was[1]) / span
        if run > 0 or wait > 0:
            kind = kind_of(tid, names)
            label = f"{kind} nice {nice}" if nice else kind
            total = kinds.get(label, (0.0, 0.0))
            kinds[label] = (total[0] + run, total[1] + wait)
    busy = (after.busy_s - before.busy_s) / span
    machine = {
        "busy": busy,
        "cores": float(os.cpu_count() or 1),
        "other processes": max(0.0, busy - (after.process_s - before.process_s) / span),
        "steal": (after.steal_s - before.steal_s) / span,
    }
    return span, kinds, machine


def python_threads() -> dict[int, str]:
    """Native thread id -> name of this process's Python threads."""
    return {t.native_id: t.name for t in threading.enumerate() if t.native_id is not None}


class ThreadTotals:
    """Seconds run and waited runnable by each kind of thread (``thread_kind``; a library's own threads
    as ``native``) over the threads' lives, those that ended included: counters for ``/metrics``."""

    def __init__(self) -> None:
        self._ended: dict[str, tuple[float, float]] = {}
        self._live: dict[int, tuple[str, float, float]] = {}

    def take(self, reading: Reading, names: dict[int, str]) -> None:
        """Account for a reading (``names``: ``python_threads()`` at about its time)."""
        for tid, (kind, run, wait) in list(self._live.items()):
            now = reading.threads.get(tid)
            if now is None or now[0] < run:  # ended (or its id taken by a new thread): keep its last times
                self._ended[kind] = _plus(self._ended.get(kind), run, wait)
                del self._live[tid]
        for tid, (run, wait, _) in reading.threads.items():
            kind = self._live[tid][0] if tid in self._live else kind_of(tid, names)
            self._live[tid] = (kind, run, wait)

    def by_kind(self) -> dict[str, tuple[float, float]]:
        """(seconds run, seconds waited runnable) of each kind so far."""
        out = dict(self._ended)
        for kind, run, wait in self._live.values():
            out[kind] = _plus(out.get(kind), run, wait)
        return out


def _plus(total: tuple[float, float] | None, run: float, wait: float) -> tuple[float, float]:
    return (run, wait) if total is None else (total[0] + run, total[1] + wait)


class MachineLoad(msgspec.Struct, frozen=True, kw_only=True):
    """The machine's cores, and how many of them were busy on average over the last ``window_s``: all
    processes (``busy``) and this one (``process``)."""

    cores: float
    window_s: float
    busy: float
    process: float


def session_cost(times: Sequence[tuple[float, float, float, int]], window_s: float) -> float | None:
    """This process's CPU per session between the first and the last of ``times`` (at, machine busy
    seconds, process seconds, sessions), or None where they span less than ``window_s``, there were no
    sessions, or their number did not hold still all through (a window in which one joined or left would
    price them wrong)."""
    at, _, process, sessions = times[-1]
    then, _, process_then, _ = times[0]
    if not sessions or at - then < window_s or any(t[3] != sessions for t in times):
        return None
    return (process - process_then) / (at - then) / sessions


class CostMemory:
    """What one session cost over windows (``note``), remembered for ``memory_s`` after each (the newest
    always, however old), and the price a newcomer is judged by (``price``): nine windows in ten of those
    remembered cost no more (``COST_QUANTILE``)."""

    def __init__(self, memory_s: float = MEMORY_S) -> None:
        self.memory_s = memory_s
        self._costs: collections.deque[tuple[float, float]] = collections.deque()  # (at, cores per session)

    def note(self, at: float, cost: float | None) -> None:
        """A window ending at ``at``: what one session cost over it, or None where it priced nothing (its
        number of sessions changed, or there were none); either way the time moves on to ``at``."""
        if cost is not None:
            self._costs.append((at, cost))
        while len(self._costs) > 1 and self._costs[0][0] < at - self.memory_s:
            self._costs.popleft()

    def price(self) -> float | None:
        """Cores per session, by ``COST_QUANTILE`` of the windows remembered; None before any."""
        if not self._costs:
            return None
        costs = sorted(c for _, c in self._costs)
        return costs[round(COST_QUANTILE * (len(costs) - 1))]


class CpuWatch(OnLoop):
    """Readings every ``EVERY_S`` on the running loop (a few dozen small file reads) from ``start`` until
    ``stop``, their totals by kind of thread, a note, on demand, of where the CPU went since the older of
    the last two, the machine's load over the last ``window_s`` and what one of ``sessions()`` sessions
    cost this process lately (admission reads both)."""

    task_name = "cpu-watch"

    def __init__(
        self,
        every_s: float = EVERY_S,
        window_s: float = WINDOW_S,
        sessions: Callable[[], int] | None = None,
        memory_s: float = MEMORY_S,
    ) -> None:
        self.every_s = every_s
        self.window_s = window_s
        self.totals = ThreadTotals()
        self._sessions = sessions
        self._readings: list[Reading] = []
        # (at, machine busy seconds, process seconds, sessions) of the readings in the window, and one older
        self._times: collections.deque[tuple[float, float, float, int]] = collections.deque()
        self._costs = CostMemory(memory_s)

    def by_kind(self) -> dict[str, tuple[float, float]]:
        """``ThreadTotals.by_kind`` as of now: a reading is taken for it (on the loop's thread, as the
        periodic ones are), so that a scrape sees all the work done up to it."""
        if (reading := read()) is not None:
            self.totals.take(reading, python_threads())
        return self.totals.by_kind()

    async def _run(self) -> None:
        while (reading := read()) is not None:
            self._readings = [*self._readings[-1:], reading]
            self.totals.take(reading, python_threads())
            sessions = self._sessions() if self._sessions is not None else 0
            self._times.append((reading.at, reading.busy_s, reading.process_s, sessions))
            while len(self._times) > 1 and self._times[1][0] <= reading.at - self.window_s:
                self._times.popleft()
            self._remember_cost()
            await asyncio.sleep(self.every_s)

    def _remember_cost(self) -> None:
        self._costs.note(self._times[-1][0], session_cost(self._times, self.window_s))

    def session_cores(self) -> float | None:
        """The cores one session measurably cost this process over a window (``window_s``) within the
        last ``memory_s``, nine windows in ten no more (``COST_QUANTILE``); or, none there, in the last
        such window; None before any."""
        return self._costs.price()

    def machine(self) -> MachineLoad | None:
        """Cores busy from the last reading at least ``window_s`` old (or the oldest) until now; None
        before the watch has run a tenth of a second, or without /proc. Reads the machine's and this
        process's times only, not every thread's (admission and each scrape call it)."""
        try:
            at, (busy_now, _), process_now = time.monotonic(), machine_times(), process_s()
        except OSError:
            return None
        if not self._times or at - self._times[0][0] < 0.1:
            return None
        then, busy_then, process_then, _ = self._times[0]
        span = at - then
        return MachineLoad(
            cores=float(os.cpu_count() or 1),
            window_s=span,
            busy=(busy_now - busy_then) / span,
            process=(process_now - process_then) / span,
        )

    def note(self) -> str:
        """Cores used since the older kept reading, busiest thread kinds first (with the cores' worth they
        waited runnable, where that is 0.01 or more), then the machine's: ``over the last 0.7 s, in cores:
        lane 0.95 (0.12 waiting), loop 0.20, voice nice 10 0.31, native 0.12; machine busy 1.95 of 2, other
        processes 0.40, steal 0.00``. Empty before the first reading or without /proc."""
        now = read()
        if now is None or not self._readings:
            return ""
        span, kinds, machine = shares(self._readings[0], now, python_threads())
        threads = ", ".join(
            f"{kind} {run:.2f}" + (f" ({wait:.2f} waiting)" if wait >= 0.01 else "")
            for kind, (run, wait) in sorted(kinds.items(), key=lambda kv: -kv[1][0])
            if run >= 0.005 or wait >= 0.01
        )
        return (
            f"over the last {span:.1f} s, in cores: {threads}; machine busy {machine['busy']:.2f} of "
            f"{machine['cores']:.0f}, other processes {machine['other processes']:.2f}, "
            f"steal {machine['steal']:.2f}"
        )
