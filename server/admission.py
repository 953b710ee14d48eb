"""Whether the server takes one more live session: what its generators measurably keep in real time.

``Limits.max_sessions`` stays a ceiling. Below it, where the sessions' generators run in this process
(``streaming_model.pool.MeasuredPool``: a thread per session, or lanes that batch), a session is admitted
only while the generator thread it would join stays at or under ``Limits.generator_busy_max`` with it:
that thread's share of time spent on chunks over the last seconds, measured (or what the backend's
warm-up costs give for its sessions, when that is higher: a session that just started has not shown its
load yet), plus what the costs say the newcomer adds, batching counted (``GeneratorLoad``). Sessions
still being built count as newcomers too, so a storm of starts cannot overfill. Sessions waiting for
their client are paused and count for nothing until it comes back, when they are admitted again. A
refusal names the figures. An idle server always takes its first session. Generators elsewhere (a Ray
cluster's slots) refuse for themselves when every slot is taken.
"""

from __future__ import annotations

from server.limits import Limits
from streaming_model.pool import GeneratorLoad, MeasuredPool, WorkerPool


class Admission:
    """Decides on each new live session from the limits and the generators' measured load."""

    def __init__(self, limits: Limits, workers: WorkerPool) -> None:
        self.limits = limits
        self.workers = workers

    def load(self, joining: int = 1) -> GeneratorLoad | None:
        """The generators' load now and with ``joining`` more sessions; None where it is not measured here."""
        return self.workers.load(joining) if isinstance(self.workers, MeasuredPool) else None

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
        if not isinstance(self.workers, MeasuredPool) or live == 0:
            return None
        now = self.workers.load(0)
        load = self.workers.load(max(0, live - now.sessions) + 1)
        if load.after <= self.limits.generator_busy_max:
            return None
        return (
            f"server at capacity: with {live} live sessions, one more would keep the generator thread it "
            f"joins {load.after:.0%} busy, past the {self.limits.generator_busy_max:.0%} at which chunks "
            f"stay on time (its {load.threads} generator thread(s): {load.busy:.0%} busy, measured over the "
            f"last {load.window_s:.0f} s; {load.predicted:.0%} by the model's warm-up costs); try again later"
        )

    def capacity(self) -> int:
        """Live sessions the server would hold now by the same rule: those it holds and as many more as
        would be admitted one after another (at most ``max_sessions``)."""
        load = self.load(0)
        if load is None:
            return self.limits.max_sessions
        more = 0
        while load.sessions + more < self.limits.max_sessions:
            after = self.load(more + 1)
            if after is None or (load.sessions + more > 0 and after.after > self.limits.generator_busy_max):
                break
            more += 1
        return load.sessions + more
