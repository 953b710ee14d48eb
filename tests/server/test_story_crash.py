"""Faults: a real ``onstage serve`` killed with SIGKILL while it streams a story, then started again on the
same story database, brings the session back at its last checkpoint, and the picture continues exactly.

The checkpoint is known to be written when its row in the database holds the generator's snapshot: the
test reads the file (``tests/support/story_db.py``) until it does. The server never drops media for this
test's client (its limits say so): on a loaded machine the client can fall behind for a moment, and what
is checked here is that every frame continues exactly, not the rule for slow clients
(tests/server/test_slow_client.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sqlite3
from pathlib import Path

import pytest

from server.client import SessionClient, VideoFrame
from tests.support.served_process import onstage_serve
from tests.support.story_db import snapshot_saved

pytestmark = pytest.mark.slow

CHUNK_WAIT_S = 120.0
KEEP_ALL_MEDIA = (
    "[server.limits]\nmedia_max_age_s = 600.0\nmedia_backlog_s = 600.0\nmedia_queue_frames = 100000\n"
)


def serve(db: Path) -> contextlib.AbstractAsyncContextManager[tuple[asyncio.subprocess.Process, str]]:
    """``onstage serve`` with ``db`` as its story database; yields (process, session URL)."""
    return onstage_serve(db.with_name("onstage.toml"), KEEP_ALL_MEDIA, "--story-db", str(db))


async def chunk_frames(client: SessionClient, gen_chunk: int, after_media: int = -1) -> list[bytes]:
    """The 4 JPEGs of generator chunk ``gen_chunk``, sent at a media chunk later than ``after_media``."""

    def of_it(f: VideoFrame) -> bool:
        return f.header["gen_chunk"] == gen_chunk and f.header["chunk"] > after_media

    try:
        first = await client.wait_frame(of_it, CHUNK_WAIT_S)
        media = first.header["chunk"]
        await client.wait_frame(lambda f: f.header["chunk"] == media and f.header["frame"] == 3, CHUNK_WAIT_S)
    except TimeoutError:
        seen = [(f.header["chunk"], f.header["frame"], f.header["gen_chunk"]) for f in client.received.video]
        errors = [m for _, m in client.received.messages if m.get("type") == "error"]
        raise AssertionError(
            f"generator chunk {gen_chunk} after media chunk {after_media} is not all there: the frames "
            f"(chunk, frame, gen_chunk) {seen[:24]} ... {seen[-12:]} of {len(seen)}, the messages "
            f"{[m for _, m in client.received.messages if m.get('type') != 'figures'][-20:]}, errors {errors}"
        ) from None
    return [f.jpeg for f in client.received.video if f.header["chunk"] == media]


async def test_a_server_killed_mid_stream_comes_back_on_its_story_database(tmp_path: Path) -> None:
    db = tmp_path / "stories.sqlite"
    async with serve(db) as (process, url), SessionClient(url) as client:
        started = await client.start(story="garden_gate", director="script", seed=4, timeout=60)
        session = started["session_id"]
        await client.wait_type("story.state", CHUNK_WAIT_S, node="gate")
        await client.send({"type": "story.choose", "choice": "wave"})
        porch = await client.wait_type("story.state", CHUNK_WAIT_S, node="porch")
        chunk = await snapshot_saved(db, session, porch["checkpoint"], CHUNK_WAIT_S)
        original = [await chunk_frames(client, chunk + 1), await chunk_frames(client, chunk + 2)]
        assert process.returncode is None  # still streaming: the kill lands mid-stream
        process.send_signal(signal.SIGKILL)
        assert await process.wait() == -signal.SIGKILL

    with contextlib.closing(sqlite3.connect(db)) as con:
        assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert con.execute("PRAGMA journal_mode").fetchone() == ("wal",)

    async with serve(db) as (_, url), SessionClient(url) as client:
        resume = {"session_id": session, "resume_token": started["resume_token"]}
        back = await client.start(resume=resume, timeout=60)
        assert back["session_id"] == session
        state = await client.wait_type("story.state", CHUNK_WAIT_S)
        assert (state["node"], state["checkpoint"]) == ("porch", porch["checkpoint"])
        assert [n["beat"] for n in state["history"]] == ["gate", "porch"]
        assert state["variables"] == porch["variables"]
        resumed = [await chunk_frames(client, chunk + 1), await chunk_frames(client, chunk + 2)]

        # A rewind to the same checkpoint in the revived server gives the same chunks again.
        media = client.received.video[-1].header["chunk"]
        since = len(client.received.messages)
        await client.send({"type": "story.rewind", "checkpoint": porch["checkpoint"], "ref": "back"})
        assert (await client.wait_type("input.accepted", CHUNK_WAIT_S, ref="back"))["kind"] == "story"
        again = await client.wait_for(lambda m: m.get("type") == "story.state", CHUNK_WAIT_S, since)
        assert (again["node"], again["checkpoint"]) == ("porch", porch["checkpoint"])
        rewound = [await chunk_frames(client, chunk + 1, media), await chunk_frames(client, chunk + 2, media)]
        # Inside the server's context: a failure shows what the revived server logged.
        assert resumed == rewound, differing(chunk, resumed, rewound)  # byte for byte: it is deterministic
    assert resumed == original, differing(chunk, original, resumed)  # and as the killed server sent it


def differing(chunk: int, a: list[list[bytes]], b: list[list[bytes]]) -> str:
    """Which frames of generator chunks ``chunk`` + 1 and + 2 differ between two streams."""
    return "; ".join(
        f"chunk {chunk + 1 + i}: frames {[f for f in range(max(len(x), len(y))) if x[f : f + 1] != y[f : f + 1]]}"
        f" of {len(x)} / {len(y)} differ"
        for i, (x, y) in enumerate(zip(a, b, strict=True))
    )
