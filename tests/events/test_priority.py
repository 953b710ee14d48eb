"""Background model threads run nicer than the generator's, and threads they start inherit that."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from events.priority import BACKGROUND_NICENESS, background_executor

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="per-thread nice values are a Linux feature")


def this_threads_nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def test_a_background_worker_runs_nicer_than_the_thread_that_made_it() -> None:
    base = this_threads_nice()
    with background_executor("test") as pool:
        assert pool.submit(this_threads_nice).result() == min(19, base + BACKGROUND_NICENESS)
    assert this_threads_nice() == base  # the caller keeps its priority


def test_threads_started_on_a_background_worker_inherit_its_priority() -> None:
    # What makes loading a model there enough: CTranslate2 starts its own worker threads at load.
    def start_a_thread() -> int:
        seen: list[int] = []
        t = threading.Thread(target=lambda: seen.append(this_threads_nice()))
        t.start()
        t.join()
        return seen[0]

    base = this_threads_nice()
    with background_executor("test") as pool:
        assert pool.submit(start_a_thread).result() == min(19, base + BACKGROUND_NICENESS)
