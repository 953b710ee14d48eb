"""A network namespace that holds only loopback, for tests whose traffic must not leave it (WebRTC: ICE
gathers candidates on every interface it can see).

``loopback_namespace`` moves the calling thread into a fresh namespace made by ``unshare -rn`` (with
``lo`` brought up) and back out at the end. A socket lives in the namespace of the thread that made it, and
threads and processes inherit their creator's: what this thread starts meanwhile (the event loop's sockets,
its executor's new threads, Chromium) is inside too.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import subprocess
from collections.abc import Iterator

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


class NamespaceError(RuntimeError):
    """The namespace could not be made or entered; the message says which step failed and how."""


def _setns(fd: int, what: str) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise NamespaceError(f"setns({what}, CLONE_NEWNET) failed: {os.strerror(errno)} (errno {errno})")


@contextlib.contextmanager
def loopback_namespace() -> Iterator[None]:
    """This thread in a network namespace holding only ``lo`` (up), for the ``with`` block."""
    holder = subprocess.Popen(
        ["unshare", "-rn", "sh", "-c", "ip link set lo up && echo up && exec sleep infinity"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stderr is not None
        if holder.stdout.readline().strip() != "up":
            holder.wait(10)
            raise NamespaceError(f"unshare -rn / ip link set lo up failed: {holder.stderr.read().strip()}")
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        target = os.open(f"/proc/{holder.pid}/ns/net", os.O_RDONLY)
        try:
            _setns(target, f"/proc/{holder.pid}/ns/net")
            try:
                yield
            finally:
                _setns(own, "this thread's own namespace")
        finally:
            os.close(target)
            os.close(own)
    finally:
        holder.kill()
        holder.wait()
