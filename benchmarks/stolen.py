"""CPU time the hypervisor took from this machine while a benchmark ran (``steal`` in ``/proc/stat``).

A run during which a neighbour on the same host had a core for a while measures the neighbour as much as
the code: on these 2-core machines a late chunk's warning has shown ``steal 0.96`` (of 2 cores), and the
same benchmark's p50 moved by 30 ms from run to run. A benchmark says how much was stolen beside its
figures, so runs can be compared where little was. Linux only: elsewhere ``Stolen.cores`` is None.
"""

from __future__ import annotations

import os
import time

from server.cpu_watch import machine_times


class Stolen:
    """Steal since this was made, in cores: 1.0 is one core's time taken all along."""

    def __init__(self) -> None:
        self._start = _reading()

    def cores(self) -> float | None:
        """Cores' time stolen per second since the start; None without ``/proc``."""
        now = _reading()
        if self._start is None or now is None or now[0] <= self._start[0]:
            return None
        return (now[1] - self._start[1]) / (now[0] - self._start[0])

    def line(self, what: str) -> str:
        """A sentence for a report: how much the hypervisor took during ``what``."""
        cores = self.cores()
        if cores is None:
            return f"Steal during {what}: unknown (no /proc/stat)."
        return (
            f"Steal during {what}: {cores:.2f} of the machine's {os.cpu_count()} cores' time went to the "
            "hypervisor (/proc/stat); compare runs where it is near 0."
        )


def _reading() -> tuple[float, float] | None:
    try:
        return time.monotonic(), machine_times()[1]
    except OSError:
        return None
