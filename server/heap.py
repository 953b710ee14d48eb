"""Freeing what an ended session held, promptly, and giving it back to the system.

Measured (benchmarks/memory.py): the server grew about 11 MiB for every session that ended, with no
session object kept by anything but itself. A session's parts refer to each other (conductor, tasks and
their tracebacks, bus subscriptions, the minds' callbacks), so reference counting never frees them: only
a full cyclic collection does, and Python runs those rarely, the more rarely the more long-lived objects
the process has (the models, torch and scipy: a full collection took ~230 ms here). Ended sessions, with
their generator caches, piled up until one ran. So: the objects loaded before serving are frozen out of
the collector (``gc.freeze``: full collections no longer scan them), each ended session is collected at
once, and glibc is asked to return the free pages (``malloc_trim``).

That halved the growth; the rest was glibc's arenas: each new worker thread may get an arena of its own
(up to 8 per core), and each arena keeps, fragmented, what the largest session it served needed. With
the arenas capped at two (``mallopt(M_ARENA_MAX)``, as ``MALLOC_ARENA_MAX=2`` would), memory stays flat.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import functools
import gc

ARENAS = 2
"""glibc malloc arenas at most (one per core of the machine this was sized on)."""
_M_ARENA_MAX = -8  # mallopt's parameter number (malloc.h)


def prepare_for_serving() -> None:
    """Exempt everything alive now (the loaded models, the libraries) from cyclic collections: they live
    as long as the server, and scanning them made every full collection slow. Cap malloc's arenas."""
    gc.collect()
    gc.freeze()
    libc = _libc()
    if libc is not None:
        # Threads started from now on share the arenas there are, up to ARENAS of them.
        libc.mallopt(_M_ARENA_MAX, ARENAS)


async def release_ended() -> None:
    """Collect what ended sessions left in reference cycles, then return free pages to the system (off
    the event loop: it can take milliseconds)."""
    gc.collect()
    await asyncio.to_thread(_trim)


@functools.cache
def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.malloc_trim, libc.mallopt  # noqa: B018 (glibc only: musl and macOS have neither)
    except (OSError, AttributeError):
        return None
    return libc


def _trim() -> None:
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)
