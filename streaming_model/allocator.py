"""Freed memory kept mapped, so that a chunk's tensors do not fault their pages in again every chunk.

A chunk allocates and frees the same few megabytes of tensors over and over (the decoder's feature maps
are 2 MiB each). glibc's malloc hands blocks that large to ``mmap`` and gives freed ones back to the
kernel (``munmap``, or trimming the heap's top), so the next chunk touches fresh pages and takes a page
fault per 4 KiB: about 1,100 faults a chunk on the main thread and 1,400-2,100 on a worker thread, 5-8 %
of a chunk's time on a virtual machine's AVX2 EPYC (BENCHMARKS.md, "Thirty-first session"). glibc raises
its thresholds by itself once a process frees a larger block than before, so whether a process faults
depended on its history: a served ``onstage serve`` took about 50 faults a chunk either way (something in
its start-up had raised them), the benchmarks' processes 1,400. Raising the two thresholds up front
keeps such blocks in the heap and the heap's freed top mapped in every process: a few faults a chunk, the
same bits, and at most ``TRIM_THRESHOLD`` more resident memory per malloc arena.

A process where the environment sets glibc's allocator itself (any ``MALLOC_*`` variable or
``GLIBC_TUNABLES``) is left as set: that is also how a benchmark runs the allocator as glibc ships it
(``MALLOC_PERTURB_=0`` changes nothing else). Elsewhere than glibc nothing is done.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys

MMAP_THRESHOLD = 32 << 20
"""Blocks below this come from the heap, not from ``mmap`` (glibc's own ceiling for its adaptive
threshold)."""
TRIM_THRESHOLD = 64 << 20
"""Freed memory at the heap's top is kept mapped up to this much."""
_M_TRIM_THRESHOLD = -1  # mallopt's parameter numbers, from glibc's malloc.h
_M_MMAP_THRESHOLD = -3


def set_by_environment() -> bool:
    """Whether the environment tunes glibc's allocator itself (then it is left as set)."""
    return "GLIBC_TUNABLES" in os.environ or any(name.startswith("MALLOC_") for name in os.environ)


@functools.cache
def keep_freed_pages() -> bool:
    """Raise glibc's mmap and trim thresholds for this process (once; later calls return the first
    answer). True where they were set; False where the environment tunes the allocator itself, or the C
    library is not glibc."""
    if not sys.platform.startswith("linux") or set_by_environment():
        return False
    libc = ctypes.CDLL(None)
    if not hasattr(libc, "gnu_get_libc_version"):  # musl and others: another allocator, other knobs
        return False
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )
