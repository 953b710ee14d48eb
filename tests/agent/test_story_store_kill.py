"""A process killed (SIGKILL) while it writes story checkpoints leaves a sound database that holds every
save it finished, with at most the save in flight lost: each save, session record and checkpoint
together, is one transaction of a WAL-mode SQLite file."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import sys
from pathlib import Path

from agent.story.store import CheckpointStore

ROOT = Path(__file__).resolve().parents[2]

WRITER = """
import asyncio, os, sys
from agent.realizer import Realizer
from agent.story.format import load_story
from agent.story.store import Checkpoint, CheckpointStore, SessionRecord
from agent.story.state import HistoryNode, StoryState

async def main() -> None:
    store = await CheckpointStore.open(sys.argv[1])
    story, realizer, history = load_story("garden_gate"), Realizer(session="s1"), []
    for i in range(100000):
        realizer.tick(i)
        history.append(HistoryNode(checkpoint=f"c{i}", beat="gate", via="start"))
        record = SessionRecord(session="s1", story=story, branches={}, history=history, current=f"c{i}")
        state = StoryState(beat="gate", variables={"trust": i}, visits={}, seed=0)
        # A large generator state makes each write long enough for the kill to land inside one.
        generator = os.urandom(1 << 20)
        await store.save(record, Checkpoint(f"c{i}", state, i, realizer.snapshot(), None, generator))
        print(i, flush=True)

asyncio.run(main())
"""


async def test_a_kill_mid_write_keeps_every_finished_save_and_a_sound_file(tmp_path: Path) -> None:
    db = tmp_path / "stories.db"
    writer = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        WRITER,
        str(db),
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert writer.stdout is not None
    done = -1
    while done < 20:
        line = await asyncio.wait_for(writer.stdout.readline(), 120)
        assert line, "the writer stopped before its 20th save"
        done = int(line)
    writer.send_signal(signal.SIGKILL)  # the writer is already inside its next save
    assert await writer.wait() == -signal.SIGKILL
    done = max([done, *(int(n) for n in (await writer.stdout.read()).split())])

    with sqlite3.connect(db) as con:
        assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert con.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        kept = {row[0] for row in con.execute("SELECT id FROM story_checkpoints")}
    # Every save the writer reported is there; of the one it was in, all or nothing.
    assert {f"c{i}" for i in range(done + 1)} <= kept <= {f"c{i}" for i in range(done + 2)}
    store = await CheckpointStore.open(db)
    record = await store.session("s1")
    assert record is not None and record.current == f"c{len(kept) - 1}"
    assert len(record.history) == len(kept)  # the record and its checkpoint were written together
    last = await store.checkpoint("s1", record.current)
    assert last is not None and last.chunk == len(kept) - 1 and last.state.variables["trust"] == last.chunk
    assert last.realizer is not None and isinstance(last.generator, bytes) and len(last.generator) == 1 << 20
    await store.close()
