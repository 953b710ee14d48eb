"""Story checkpoints and sessions in SQLite (a file, or ``:memory:``), so a restarted server can continue.

Two tables: ``story_sessions`` (one row per session: the story as written, the branches added, the
history tree and the current checkpoint) and ``story_checkpoints`` (one row per checkpoint: the story
state, the Director's memory, the realizer's snapshot, the generator's state and the chunk it was taken
at). The story parts are msgspec JSON; the realizer's and the generator's snapshots are versioned blobs
(``agent.story.blobs``: msgpack and plain arrays, checksummed) that cannot run code. A row this code cannot
read (corrupt, of a newer onstage, or an old pickle, which is never unpickled) is refused with a
``StoryError`` naming the checkpoint and what is wrong.

A file database runs in WAL mode and writes each save (record and checkpoint) in one transaction: a
process killed mid-write loses at most that save. Every call, encoding and decoding included, runs on a
worker thread (``asyncio.to_thread``): neither SQLite nor a snapshot's blob ever blocks the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import msgspec

from agent.director_state import DirectorMemory
from agent.realizer import RealizerSnapshot
from agent.story.blobs import (
    PICKLE_REFUSED,
    BlobError,
    decode_generator,
    decode_realizer,
    encode_generator,
    encode_realizer,
)
from agent.story.format import Beat, StoryError, StorySpec
from agent.story.state import HistoryNode, StoryState
from streaming_model.runtime import SessionSnapshot

log = logging.getLogger(__name__)

GeneratorState = SessionSnapshot | bytes
"""The generator's state at a checkpoint: the streaming runtime's snapshot, or a backend's own bytes."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS story_sessions (
    session TEXT PRIMARY KEY,
    record BLOB NOT NULL,
    updated REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS story_checkpoints (
    session TEXT NOT NULL,
    id TEXT NOT NULL,
    state BLOB NOT NULL,
    chunk INTEGER NOT NULL,
    realizer BLOB,
    director BLOB,
    generator BLOB,
    generator_kind TEXT NOT NULL,
    created REAL NOT NULL,
    PRIMARY KEY (session, id)
);
"""


class SessionRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A story session as persisted: enough to rebuild its graph and find its checkpoints."""

    session: str
    story: StorySpec
    branches: dict[str, Beat]
    history: list[HistoryNode]
    current: str


@dataclass(frozen=True)
class Checkpoint:
    """Everything needed to continue from a point of the story.

    chunk: the realizer's last ticked chunk when it was taken (the next tick is ``chunk + 1``).
    realizer / director / generator: their snapshots, None where that part is not in the session.
    """

    id: str
    state: StoryState
    chunk: int
    realizer: RealizerSnapshot | None
    director: DirectorMemory | None
    generator: GeneratorState | None


_GeneratorKind = Literal["none", "bytes", "snapshot"]
"""How a row's generator column is stored (rows of older versions say ``pickle``: refused)."""


def _pack_generator(value: GeneratorState | None) -> tuple[bytes | None, _GeneratorKind]:
    if value is None:
        return None, "none"
    if isinstance(value, SessionSnapshot):
        return encode_generator(value), "snapshot"
    return bytes(value), "bytes"


def _unpack_generator(data: bytes | None, kind: str) -> GeneratorState | None:
    if data is None or kind == "none":
        return None
    if kind == "bytes":
        return data
    if kind == "snapshot":
        return decode_generator(data)
    if kind == "pickle":
        raise BlobError(PICKLE_REFUSED)
    raise BlobError(f"of an unknown kind {kind[:40]!r}")


class CheckpointRow(msgspec.Struct, frozen=True, array_like=True):
    """One checkpoint as stored (its columns, nothing decoded), for another store (``StoryRows``)."""

    id: str
    state: bytes
    chunk: int
    realizer: bytes | None
    director: bytes | None
    generator: bytes | None
    generator_kind: str
    created: float


class StoryRows(msgspec.Struct, frozen=True, kw_only=True):
    """A story session's rows as stored: its record and checkpoints (``CheckpointStore.rows``), so that
    another front end's store can hold the session as this one does (``CheckpointStore.add_rows``)."""

    session: str
    record: bytes
    checkpoints: list[CheckpointRow]


class CheckpointStore:
    """Checkpoints and session records of any number of story sessions, in one SQLite database."""

    def __init__(self, path: str | Path = ":memory:") -> None:
        self.path = str(path)
        # One connection shared by the worker threads (``:memory:`` is private to its connection), used
        # by one thread at a time under the lock.
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._lock = threading.Lock()
        with self._lock:
            if self.path != ":memory:":
                self._db.execute("PRAGMA journal_mode=WAL")
            self._db.executescript(_SCHEMA)

    @classmethod
    async def open(cls, path: str | Path = ":memory:") -> CheckpointStore:
        """Open (and create if needed) the database on a worker thread, for callers on the event loop."""
        return await asyncio.to_thread(cls, path)

    async def save(self, record: SessionRecord, checkpoint: Checkpoint | None = None) -> None:
        """Write the session record and, when given, a checkpoint, in one transaction."""
        await asyncio.to_thread(self._save, record, checkpoint)

    def _save(self, record: SessionRecord, checkpoint: Checkpoint | None) -> None:
        row = None
        if checkpoint is not None:
            generator, kind = _pack_generator(checkpoint.generator)
            row = (
                record.session,
                checkpoint.id,
                msgspec.json.encode(checkpoint.state),
                checkpoint.chunk,
                None if checkpoint.realizer is None else encode_realizer(checkpoint.realizer),
                None if checkpoint.director is None else msgspec.json.encode(checkpoint.director),
                generator,
                kind,
                time.time(),
            )
        self._write(record.session, msgspec.json.encode(record), [] if row is None else [row])

    def _write(self, session: str, record: bytes, checkpoints: list[tuple[Any, ...]]) -> None:
        """Write a session's record and checkpoint rows (columns in table order) in one transaction."""
        with self._lock:
            self._db.execute("BEGIN")
            try:
                self._db.execute(
                    "INSERT INTO story_sessions (session, record, updated) VALUES (?, ?, ?) "
                    "ON CONFLICT(session) DO UPDATE SET record = excluded.record, updated = excluded.updated",
                    (session, record, time.time()),
                )
                self._db.executemany(
                    "INSERT OR REPLACE INTO story_checkpoints (session, id, state, chunk, realizer, director, "
                    "generator, generator_kind, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    checkpoints,
                )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    async def session(self, session: str) -> SessionRecord | None:
        """The record of ``session``, or None if it was never saved; ``StoryError`` if it cannot be read."""
        return await asyncio.to_thread(self._session, session)

    def _session(self, session: str) -> SessionRecord | None:
        found = self._one("SELECT record FROM story_sessions WHERE session = ?", (session,))
        if found is None:
            return None
        try:
            return msgspec.json.decode(found[0], type=SessionRecord)
        except msgspec.DecodeError as exc:
            log.warning("story session %r: unreadable record: %s", session, exc)
            raise StoryError.one("session", f"the saved story session {session!r} is corrupt") from None

    async def checkpoint(self, session: str, checkpoint_id: str) -> Checkpoint | None:
        """Checkpoint ``checkpoint_id`` of ``session``, or None if there is no such checkpoint; ``StoryError``
        if it cannot be read (corrupt, of a newer version, an old pickle): nothing in it is ever run."""
        return await asyncio.to_thread(self._checkpoint, session, checkpoint_id)

    def _checkpoint(self, session: str, checkpoint_id: str) -> Checkpoint | None:
        found = self._one(
            "SELECT state, chunk, realizer, director, generator, generator_kind FROM story_checkpoints "
            "WHERE session = ? AND id = ?",
            (session, checkpoint_id),
        )
        if found is None:
            return None
        state, chunk, realizer, director, generator, kind = found
        part = "story"
        try:
            story_state = msgspec.json.decode(state, type=StoryState)
            part = "realizer"
            realizer_snapshot = None if realizer is None else decode_realizer(realizer)
            part = "Director"
            memory = None if director is None else msgspec.json.decode(director, type=DirectorMemory)
            part = "generator"
            generator_state = _unpack_generator(generator, kind)
        except (BlobError, msgspec.DecodeError) as exc:
            reason = str(exc) if isinstance(exc, BlobError) else "corrupt"
            log.warning("story %r checkpoint %r: unreadable %s state: %s", session, checkpoint_id, part, exc)
            raise StoryError.one(
                "checkpoint", f"checkpoint {checkpoint_id!r}: its {part} state is {reason}"
            ) from None
        return Checkpoint(
            id=checkpoint_id,
            state=story_state,
            chunk=chunk,
            realizer=realizer_snapshot,
            director=memory,
            generator=generator_state,
        )

    async def rows(self, session: str, known: Mapping[str, float] | None = None) -> StoryRows | None:
        """``session``'s record and its checkpoints as stored, but those ``known`` already (by id, with the
        ``created`` time of the version known: one written again since is not); None if never saved."""
        return await asyncio.to_thread(self._rows, session, known or {})

    def _rows(self, session: str, known: Mapping[str, float]) -> StoryRows | None:
        with self._lock:
            record = self._db.execute(
                "SELECT record FROM story_sessions WHERE session = ?", (session,)
            ).fetchone()
            listed = self._db.execute(
                "SELECT id, created FROM story_checkpoints WHERE session = ?", (session,)
            ).fetchall()
            wanted = [cid for cid, created in listed if known.get(cid) != created]
            found = [
                self._db.execute(
                    "SELECT id, state, chunk, realizer, director, generator, generator_kind, created"
                    " FROM story_checkpoints WHERE session = ? AND id = ?",
                    (session, cid),
                ).fetchone()
                for cid in wanted
            ]
        if record is None:
            return None
        return StoryRows(
            session=session, record=record[0], checkpoints=[CheckpointRow(*row) for row in found]
        )

    async def add_rows(self, rows: StoryRows) -> None:
        """Hold ``rows`` (another store's, ``rows``) as they are, in one transaction: the record replaces
        this store's, checkpoints of the same id too. They are read (and refused if unreadable) when used."""
        await asyncio.to_thread(self._add_rows, rows)

    def _add_rows(self, rows: StoryRows) -> None:
        checkpoints = [(rows.session, *msgspec.structs.astuple(row)) for row in rows.checkpoints]
        self._write(rows.session, rows.record, checkpoints)

    async def sessions(self) -> list[str]:
        """Every session saved, most recently updated first (what a restarted server can resume)."""
        rows = await asyncio.to_thread(self._all, "SELECT session FROM story_sessions ORDER BY updated DESC")
        return [str(row[0]) for row in rows]

    def _one(self, sql: str, args: tuple[object, ...]) -> tuple[Any, ...] | None:
        with self._lock:
            return self._db.execute(sql, args).fetchone()

    def _all(self, sql: str) -> list[tuple[Any, ...]]:
        with self._lock:
            return self._db.execute(sql).fetchall()

    async def close(self) -> None:
        """Close the database (calls in flight finish first: they hold the lock)."""
        await asyncio.to_thread(self._close)

    def _close(self) -> None:
        with self._lock:
            self._db.close()
