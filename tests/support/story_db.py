"""Reading a server's story database from a test, as a second reader of its WAL-mode SQLite file."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from pathlib import Path


def checkpoint_row(db: Path, session: str, checkpoint: str) -> tuple[int, str] | None:
    """(chunk, generator kind) of a checkpoint as the database holds it now; None if it has no such row."""
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)) as con:
        row = con.execute(
            "SELECT chunk, generator_kind FROM story_checkpoints WHERE session = ? AND id = ?",
            (session, checkpoint),
        ).fetchone()
    return None if row is None else (int(row[0]), str(row[1]))


async def snapshot_saved(db: Path, session: str, checkpoint: str, timeout: float = 120.0) -> int:
    """Wait until ``checkpoint`` holds the generator's snapshot (the server re-takes a move's checkpoint at
    the next chunk boundary); returns the chunk it was taken after."""
    async with asyncio.timeout(timeout):
        while True:  # the server writes the file, possibly from another process: nothing to await but it
            row = await asyncio.to_thread(checkpoint_row, db, session, checkpoint)
            if row is not None and row[1] == "snapshot":
                return row[0]
            await asyncio.sleep(0.05)
