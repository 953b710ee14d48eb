"""A story database is data, never code: a crafted row cannot run anything when a checkpoint is read.

Before checkpoints had their own format, the realizer snapshot and the generator state were pickles, and
reading a checkpoint unpickled them: whoever could write the SQLite file could run code in the server.
These tests craft such rows (the kind an attacker, or the old code, would write) and check that reading
them runs nothing and fails with a StoryError that says what is wrong.
"""

from __future__ import annotations

import pickle
import re
import sqlite3
from pathlib import Path

import pytest

from agent.realizer import Realizer
from agent.story.format import StoryError, load_story
from agent.story.player import StoryPlayer
from agent.story.store import CheckpointStore


class _WritesAFile:
    """Unpickling this calls ``Path.write_text(marker, "ran")``: any callable could stand there."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        return (Path.write_text, (self.marker, "ran"))


async def _story_db(path: Path) -> None:
    store = CheckpointStore(path)
    await StoryPlayer.begin(load_story("garden_gate"), Realizer(session="s1"), session="s1", store=store)
    await store.close()


@pytest.mark.parametrize("column", ["realizer", "generator"])
async def test_a_crafted_pickle_in_a_checkpoint_row_is_refused_and_never_run(
    tmp_path: Path, column: str
) -> None:
    db, marker = tmp_path / "stories.db", tmp_path / "marker"
    await _story_db(db)
    crafted = pickle.dumps(_WritesAFile(marker))
    with sqlite3.connect(db) as con:
        # generator_kind 'pickle' is what the old code wrote for a generator state that was not bytes.
        extra = ", generator_kind = 'pickle'" if column == "generator" else ""
        con.execute(f"UPDATE story_checkpoints SET {column} = ?{extra} WHERE id = 'c1'", (crafted,))

    store = await CheckpointStore.open(db)
    error: StoryError | None = None
    try:
        await StoryPlayer.resume(store, Realizer(session="s1"), session="s1")
    except StoryError as exc:
        error = exc
    finally:
        await store.close()
    assert not marker.exists(), "reading the checkpoint ran the code in the crafted row"
    assert error is not None and re.match(r"^checkpoint: checkpoint 'c1': .*old pickle.*refused", str(error))
