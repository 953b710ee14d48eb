"""A restarted server refuses to bring back a story session whose saved checkpoint it cannot read, and
tells the client why in a ``resume_failed`` error (never a trace, never by running what the row holds)."""

from __future__ import annotations

import contextlib
import pickle
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from server.app import OnstageServer
from server.client import SessionClient
from server.limits import Limits
from server.sessions import SessionFactory
from tests.support.story_db import snapshot_saved

pytestmark = pytest.mark.asyncio(loop_scope="module")


class _WritesAFile:
    """Unpickling this writes a file: what a crafted row could do with any callable."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        return (Path.write_text, (self.marker, "ran"))


@contextlib.asynccontextmanager
async def serve(factory: SessionFactory, db: Path) -> AsyncIterator[str]:
    server = OnstageServer(
        SessionFactory(factory.backend, factory.voice, factory.hearing, story_db=str(db)),
        Limits(admission="ceiling"),
    )
    await server.start("127.0.0.1", 0)
    try:
        yield f"ws://127.0.0.1:{server.port}/v1/session"
    finally:
        await server.close()


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        ("flip", "its generator state is corrupt (its checksum does not match)"),
        (
            "pickle",
            "its generator state is an old pickle, refused (a pickle can run code): take this checkpoint again",
        ),
    ],
)
async def test_a_session_whose_checkpoint_is_damaged_is_refused_with_the_reason(
    factory: SessionFactory, tmp_path: Path, damage: str, reason: str
) -> None:
    db, marker = tmp_path / "stories.sqlite", tmp_path / "marker"
    async with serve(factory, db) as url, SessionClient(url) as client:
        started = await client.start(story="garden_gate", director="script", seed=2)
        await client.wait_type("story.state", 60, node="gate")
        await client.send({"type": "story.choose", "choice": "wave"})
        porch = await client.wait_type("story.state", 60, node="porch")
        await snapshot_saved(db, started["session_id"], porch["checkpoint"])

    with contextlib.closing(sqlite3.connect(db)) as con, con:
        key = (started["session_id"], porch["checkpoint"])
        (blob,) = con.execute(
            "SELECT generator FROM story_checkpoints WHERE session = ? AND id = ?", key
        ).fetchone()
        if damage == "flip":
            bad, kind = bytes(blob[:-1]) + bytes([blob[-1] ^ 1]), "snapshot"
        else:  # what the old code wrote for a generator state, with a payload
            bad, kind = pickle.dumps(_WritesAFile(marker)), "pickle"
        con.execute(
            "UPDATE story_checkpoints SET generator = ?, generator_kind = ? WHERE session = ? AND id = ?",
            (bad, kind, *key),
        )

    async with serve(factory, db) as url, SessionClient(url) as client:
        resume = {"session_id": started["session_id"], "resume_token": started["resume_token"]}
        await client.send({"type": "session.start", "resume": resume, "ref": "r"})
        error = await client.wait_type("error", 60, ref="r")
    assert not marker.exists(), "resuming ran the code in the crafted row"
    assert error["code"] == "resume_failed" and not error["fatal"]
    assert error["message"] == (
        "the saved story session cannot be continued: checkpoint: "
        f"checkpoint {porch['checkpoint']!r}: {reason}"
    )
    assert str(tmp_path) not in error["message"] and "Traceback" not in error["message"]
