"""Freeing what an ended session held, promptly, and giving it back to the system.

Measured (benchmarks/memory.py): the server grew about 11 MiB for every session that ended, with no
session object kept by anything but itself. A session's parts refer to each other (conductor, tasks and
their tracebacks, bus subscriptions, the minds' callbacks), so reference counting never frees them: only
a full cyclic collection does, and Python runs those rarely, the more rarely the more long-lived objects
the process has (the models, torch and scipy: a full collection took ~230 ms here). Ended sessions, with
their generator caches, piled up until one ran. So: the objects loaded before serving are frozen out of
the collector (``gc.freeze``: full collections no longer scan them), each ended session is collected at
once, and glibc is asked to return the free pages (``malloc_trim``): it otherwise keeps them in the arena
of the session's worker thread.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import functools
import gc


def freeze_loaded() -> None:
    """Exempt everything alive now (the loaded models, the libraries) from cyclic collections: they live
    as long as the server, and scanning them made every full collection slow."""
    gc.collect()
    gc.freeze()


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
        libc.malloc_trim  # noqa: B018 (glibc only: musl and macOS have no malloc_trim)
    except (OSError, AttributeError):
        return None
    return libc


def _trim() -> None:
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)
