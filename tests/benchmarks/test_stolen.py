"""``benchmarks/stolen.py``: the hypervisor's share of the machine while a benchmark ran, from the real
``/proc/stat`` of this machine."""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))  # the benchmarks' own module layout
from stolen import Stolen

from server.cpu_watch import machine_times


def test_steal_is_the_stolen_cores_time_per_second_of_the_run():
    began = time.monotonic()
    stolen = Stolen()
    before = machine_times()[1]
    time.sleep(0.3)
    after = machine_times()[1]
    cores = stolen.cores()
    ended = time.monotonic()
    assert cores is not None
    assert 0.0 <= cores <= (os.cpu_count() or 1)
    # The run holds the span between the two readings here and lies within [began, ended]; /proc/stat's
    # counters only grow.
    assert cores >= (after - before) / (ended - began)


def test_a_report_says_how_many_of_the_cores_went_to_the_hypervisor():
    line = Stolen().line("the inputs")
    assert re.fullmatch(
        rf"Steal during the inputs: \d+\.\d\d of the machine's {os.cpu_count()} cores' time went to the "
        r"hypervisor \(/proc/stat\); compare runs where it is near 0\.",
        line,
    ), line
