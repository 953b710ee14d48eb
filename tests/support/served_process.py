"""A real ``onstage serve`` in a process of its own (to be killed, say), on a free loopback port."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STARTUP_S = 300.0
"""Loading the models on a busy machine: generous, the wait is for the server's own line."""


@contextlib.asynccontextmanager
async def onstage_serve(
    config: Path, config_toml: str, *args: str
) -> AsyncIterator[tuple[asyncio.subprocess.Process, str]]:
    """``onstage serve --config CONFIG ARGS...`` on a free loopback port, ``config_toml`` written to
    ``config`` first; yields (process, session URL). A failure inside says what the server logged last;
    a server still running at the end is stopped with SIGTERM."""
    await asyncio.to_thread(config.write_text, config_toml)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "server.cli",
        "serve",
        "--port",
        "0",
        "--config",
        str(config),
        *args,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert process.stderr is not None
    lines: list[bytes] = []
    port: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def drain(stream: asyncio.StreamReader) -> None:
        # Read everything the server logs, so that a full pipe never blocks it.
        async for line in stream:
            lines.append(line)
            found = re.search(rb"serving on http://127\.0\.0\.1:(\d+)/", line)
            if found and not port.done():
                port.set_result(int(found[1]))
        if not port.done():
            port.set_exception(RuntimeError(b"".join(lines[-20:]).decode(errors="replace")))

    reader = asyncio.create_task(drain(process.stderr))
    try:
        yield process, f"ws://127.0.0.1:{await asyncio.wait_for(port, STARTUP_S)}/v1/session"
    except Exception as exc:
        log = b"".join(lines[-30:]).decode(errors="replace")
        raise AssertionError(f"{exc!r}; the server's last log lines:\n{log}") from exc
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            await asyncio.wait_for(process.wait(), 60)
        await reader
