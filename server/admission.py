"""Whether the server takes one more live session: what its generators and its machine measurably keep in
real time.

``Limits.max_sessions`` stays a ceiling. Below it (``Limits.admission = "measured"``, the default), where
the sessions' generators run in this process (``streaming_model.pool.MeasuredPool``: a thread per
session, or lanes that batch), a session is admitted only while the generator thread it would join stays
at or under ``Limits.generator_busy_max`` with it: that thread's share of time spent on chunks over the
last seconds, measured (or what the backend's warm-up costs give for its sessions, when that is higher: a
session that just started has not shown its load yet), plus what the costs say the newcomer adds,
batching counted, times how much more than the costs live chunks measure (``GeneratorLoad``). And only
while the machine's cores stay at or under ``Limits.machine_busy_max`` with it: the other processes' CPU
over the same seconds (``server.cpu_watch``), plus what this server's sessions and the newcomer cost, each
priced at what a session measurably cost this process lately (``CpuWatch.session_cores``: a session
that just started, or a talking one not talking now, has not shown its CPU yet; before any, its share
now), or the warm-up costs, whichever is higher. A generator thread's share shows the waits for a core it
has had, not how many cores the rest of the machine leaves free (other processes on it, a client on the
same machine); the machine's count does. Sessions still being built count as newcomers too, so a storm of
starts cannot overfill. Sessions waiting for their client are paused and count for nothing until it comes
back, when they are admitted again. A refusal names the figures. An idle server always takes its first
session. ``admission = "generators"`` leaves the machine out, ``"ceiling"`` admits up to ``max_sessions``
whatever the figures. Generators elsewhere (a Ray cluster's slots) refuse for themselves when every slot
is taken.
"""

from __future__ import annotations

import msgspec

from server.cpu_watch import CpuWatch, MachineLoad
from server.limits import Limits
from streaming_model.pool import GeneratorLoad, MeasuredPool, WorkerPool


class MachineOutlook(msgspec.Struct, frozen=True, kw_only=True):
    """The machine's load now (``MachineLoad``), what one session of this server costs in cores (the
    higher of: what one measurably cost lately, or its CPU per running session now before that is known,
    and the newcomers' warm-up costs), and the share of the machine's cores busy with ``joining`` more
    sessions (``after``), this server's running sessions counted at that cost too."""

    load: MachineLoad
    session_cores: float
    joining: int
    after: float


class Admission:
    """Decides on each new live session from the limits, the generators' measured load and the
    machine's."""

    def __init__(self, limits: Limits, workers: WorkerPool, cpu: CpuWatch | None = None) -> None:
        self.limits = limits
        self.workers = workers
        self.cpu = cpu

    def load(self, joining: int = 1) -> GeneratorLoad | None:
        """The generators' load now and with ``joining`` more sessions; None where it is not measured here."""
        return self.workers.load(joining) if isinstance(self.workers, MeasuredPool) else None

    def machine(self, live: int, joining: int = 1) -> MachineOutlook | None:
        """The machine's load now and with ``joining`` more sessions than the ``live`` ones (those the
        generators do not count yet, being built, join too); None where it is not measured (no /proc, no
        watch or one not started). Measured whatever ``Limits.admission`` says (``/metrics``)."""
        if self.cpu is None or (load := self.cpu.machine()) is None:
            return None
        return self._outlook(load, live, joining, self.cpu.session_cores())

    def _outlook(
        self,
        load: MachineLoad,
        live: int,
        joining: int,
        remembered: float | None,
        generators: tuple[GeneratorLoad, GeneratorLoad] | None = None,
    ) -> MachineOutlook:
        """``remembered``: what a session measurably cost (``CpuWatch.session_cores``); ``generators``: the
        pool's load now and with ``joining`` more, where the caller has them."""
        if generators is None:
            now = self.load(0)
            joining += max(0, live - now.sessions) if now is not None else 0
            later = self.load(joining)
            generators = (now, later) if now is not None and later is not None else None
        running = generators[0].sessions if generators is not None else live
        # What sessions cost over windows in which they neither came nor went; until one is known, the
        # share now (which counts a session that just left, and not yet one that just came).
        measured = remembered if remembered is not None else load.process / running if running else 0.0
        costs = generators[1].added / joining if generators is not None else 0.0
        session_cores = max(measured, costs)
        this_server = max(load.process, running * session_cores)
        after = (load.busy - load.process + this_server + joining * session_cores) / load.cores
        return MachineOutlook(load=load, session_cores=session_cores, joining=joining, after=after)

    def refusal(self, live: int) -> str | None:
        """Why one more session cannot be live now (None: it can), given ``live`` sessions: those with a
        client and those being built. Sessions waiting for their client are paused and cost their
        generators nothing; each is admitted again when its client comes back. Live sessions the pool does
        not count yet (being built) count as joining too."""
        if live >= self.limits.max_sessions:
            return (
                f"server at capacity: {live} live sessions is the most it is configured to keep "
                f"(max_sessions); try again later"
            )
        # An idle server takes one session whatever its figures say: refusing the only one serves no one
        # (on a machine too slow or too busy for one session in real time, its chunks run late instead).
        if live == 0:
            return None
        mode = self.limits.admission
        if mode == "ceiling":
            return None
        # The machine first: its refusal says what a generator thread's share cannot see.
        return (self._machine_refusal(live) if mode == "measured" else None) or self._generators_refusal(live)

    def _generators_refusal(self, live: int) -> str | None:
        if not isinstance(self.workers, MeasuredPool):
            return None
        now = self.workers.load(0)
        load = self.workers.load(max(0, live - now.sessions) + 1)
        if load.after <= self.limits.generator_busy_max:
            return None
        return (
            f"server at capacity: with {live} live sessions, one more would keep the generator thread it "
            f"joins {load.after:.0%} busy, past the {self.limits.generator_busy_max:.0%} at which chunks "
            f"stay on time (its {load.threads} generator thread(s): {load.busy:.0%} busy, measured over the "
            f"last {load.window_s:.0f} s; {load.predicted:.0%} by the model's warm-up costs"
            + (f", which live chunks exceed {load.ratio:.1f}-fold" if load.ratio > 1.0 else "")
            + "); try again later"
        )

    def _machine_refusal(self, live: int) -> str | None:
        outlook = self.machine(live)
        if outlook is None or outlook.after <= self.limits.machine_busy_max:
            return None
        load = outlook.load
        return (
            f"server at capacity: with {live} live sessions, one more would keep the machine's "
            f"{load.cores:.0f} cores {outlook.after:.0%} busy, past the {self.limits.machine_busy_max:.0%} "
            f"it may take (machine_busy_max; over the last {load.window_s:.0f} s, {load.busy:.2f} cores busy, "
            f"{load.process:.2f} of them this server's; a session costs {outlook.session_cores:.2f} "
            f"cores, what one measurably took lately or its warm-up costs); try again later"
        )

    def capacity(self) -> int:
        """Live sessions the server would hold now by the same rules: those it holds and as many more as
        would be admitted one after another (at most ``max_sessions``)."""
        if not isinstance(self.workers, MeasuredPool) or self.limits.admission == "ceiling":
            return self.limits.max_sessions
        workers, limits = self.workers, self.limits
        load = workers.load(0)
        machine = self.cpu.machine() if self.cpu is not None and limits.admission == "measured" else None
        remembered = self.cpu.session_cores() if machine is not None and self.cpu is not None else None

        def fits(joining: int) -> bool:
            later = workers.load(joining)
            return later.after <= limits.generator_busy_max and (
                machine is None
                or self._outlook(machine, load.sessions, joining, remembered, (load, later)).after
                <= limits.machine_busy_max
            )

        more = 0
        while load.sessions + more < limits.max_sessions and (load.sessions + more == 0 or fits(more + 1)):
            more += 1
        return load.sessions + more
