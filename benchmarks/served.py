"""A live server in its own process, as users meet it: ``onstage serve`` on a free loopback port.

The benchmarks measure the server from outside. Run in the benchmark's own process, the server would
share its event loop and interpreter lock with the client that measures it (20 ms microphone frames, 48
received messages a second), and the client's work would show up as the server's lateness.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import sys
import tempfile
import urllib.request
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parent.parent
READY = re.compile(r"serving on http://([\d.]+):(\d+)/")
START_TIMEOUT_S = 120.0
SERVER_PIDS: dict[str, int] = {}
"""Base URL -> process id of each server ``served`` is running (to read its memory)."""


@contextlib.asynccontextmanager
async def served(
    config_toml: str = "",
    env: Mapping[str, str] | None = None,
    stdout: Callable[[str], None] | None = None,
    stderr: Callable[[str], None] | None = None,
) -> AsyncIterator[str]:
    """Start ``onstage serve`` with ``config_toml`` (its ``[server]`` and ``[director]`` tables) on a free
    port, with ``env`` added to its environment; yield its base URL (``http://127.0.0.1:PORT``); stop it
    at the end. ``stdout`` is given each line the server prints there (a console span exporter's);
    ``stderr`` each line it logs, as it comes (they are also forwarded to this process's stderr)."""
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "onstage.toml"
        config.write_text(config_toml)
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "server.cli",
            "serve",
            "--config",
            str(config),
            "--port",
            "0",
            stderr=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE if stdout is not None else None,
            cwd=ROOT,
            env={**os.environ, **(env or {})},
        )
        assert proc.stderr is not None
        drain: asyncio.Task[None] | None = None
        lines: asyncio.Task[None] | None = None
        if stdout is not None:
            assert proc.stdout is not None
            lines = asyncio.create_task(_lines(proc.stdout, stdout))
        try:
            base = await asyncio.wait_for(_ready(proc.stderr), START_TIMEOUT_S)
            drain = asyncio.create_task(_forward_warnings(proc.stderr, stderr))
            SERVER_PIDS[base] = proc.pid
            yield base
        finally:
            if drain is not None:
                drain.cancel()
            if proc.returncode is None:
                proc.terminate()
                try:
                    await asyncio.wait_for(proc.wait(), 15)
                except TimeoutError:
                    print("warning: the server did not stop within 15 s; killed", file=sys.stderr)
                    proc.kill()
                    await proc.wait()
            if lines is not None:
                await lines  # to the end: what the server printed as it stopped


async def _lines(stream: asyncio.StreamReader, take: Callable[[str], None]) -> None:
    while line := (await stream.readline()).decode(errors="replace"):
        take(line)


async def _ready(stream: asyncio.StreamReader) -> str:
    while line := (await stream.readline()).decode(errors="replace"):
        if match := READY.search(line):
            return f"http://{match[1]}:{match[2]}"
        sys.stderr.write(f"server: {line}")
    raise RuntimeError("the server exited before it was serving (its output is above)")


async def _forward_warnings(stream: asyncio.StreamReader, take: Callable[[str], None] | None) -> None:
    # Read on so that the server never blocks on a full pipe; what it says goes to our stderr.
    while line := (await stream.readline()).decode(errors="replace"):
        sys.stderr.write(f"server: {line}")
        if take is not None:
            take(line)


def rss_mib(base: str) -> float:
    """Resident memory of the server at ``base`` (Linux: from /proc)."""
    status = Path(f"/proc/{SERVER_PIDS[base]}/status").read_text()
    match = re.search(r"VmRSS:\s+(\d+) kB", status)
    if match is None:
        raise RuntimeError(f"no VmRSS for process {SERVER_PIDS[base]}")
    return int(match[1]) / 1024


def session_url(base: str) -> str:
    """The WebSocket endpoint of a server's sessions."""
    return base.replace("http://", "ws://") + "/v1/session"


def session_counters(base: str) -> dict[str, float]:
    """The one live session's ``onstage_session_*`` figures from ``/metrics`` (blocking: call in a thread),
    a quantile's as ``chunk_seconds_q0.5``; empty with no session."""
    return next(iter(sessions_counters(base).values()), {})


def sessions_counters(base: str) -> dict[str, dict[str, float]]:
    """Each live session's ``onstage_session_*`` figures from ``/metrics``, by session id, as
    ``session_counters`` gives them (blocking: call in a thread)."""
    with urllib.request.urlopen(f"{base}/metrics", timeout=5) as response:
        text = response.read().decode()
    counters: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            # onstage_session_cores is the server's price of a session, not one session's figure
            if sample.name.startswith("onstage_session_") and "session" in sample.labels:
                name = sample.name.removeprefix("onstage_session_")
                if "quantile" in sample.labels:
                    name += f"_q{sample.labels['quantile']}"
                counters.setdefault(sample.labels["session"], {})[name] = sample.value
    return counters
