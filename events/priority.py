"""Worker threads for background model work (speech recognition, speech synthesis) at a lower CPU priority.

On two cores, the video generator must keep its deadlines while Whisper transcribes a turn and Piper speaks a
reply. Linux keeps a nice value per thread, and threads a library starts (CTranslate2's workers) inherit it
from the thread that started them: so such models are loaded and run on these threads, and when the cores
are contended the scheduler gives the generator and the event loop most of them.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

BACKGROUND_NICENESS = 10
"""Added to the process's nice value: at +10 a thread weighs about a tenth of a normal one on a busy core."""


def lower_this_thread(niceness: int = BACKGROUND_NICENESS) -> None:
    """Make the calling thread ``niceness`` steps nicer (Linux: per thread; elsewhere: no change)."""
    if not hasattr(os, "setpriority") or not hasattr(threading, "get_native_id"):
        return
    tid = threading.get_native_id()
    try:
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + niceness))
    except OSError:
        pass  # not permitted here: run at the usual priority rather than not at all


def background_executor(name: str, niceness: int = BACKGROUND_NICENESS) -> ThreadPoolExecutor:
    """A single worker thread, ``niceness`` steps nicer than its creator, for one model's calls in turn."""
    return ThreadPoolExecutor(
        max_workers=1, thread_name_prefix=name, initializer=lower_this_thread, initargs=(niceness,)
    )
