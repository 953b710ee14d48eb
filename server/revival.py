"""Story sessions a restarted server can bring back: what each session asked for, and its resume token.

The story's own state lives in the story store (``agent.story.store``); this table, in the same SQLite
file, keeps what a new server needs to rebuild the rest of the session (seed, character, mind, story) and
checks the client's resume token, stored as a SHA-256 hash only. Rows are JSON, never code. A file
database runs in WAL mode, as the story store does, and each save is one statement: a server killed
mid-write loses at most that save.
"""

from __future__ import annotations

import hashlib
import hmac
import sqlite3
import threading

import msgspec

from server import protocol as p


class SessionRecords:
    """A small SQLite table: session id -> (hashed resume token, its ``session.start``). Thread-safe."""

    def __init__(self, path: str) -> None:
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._lock = threading.Lock()
        with self._lock:
            if path != ":memory:":
                self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS resumable_sessions"
                " (session_id TEXT PRIMARY KEY, token_sha256 TEXT NOT NULL, start TEXT NOT NULL)"
            )

    def save(self, session_id: str, resume_token: str, start: p.SessionStart) -> None:
        """Keep what ``session_id`` was started with, under the hash of its resume token."""
        row = (session_id, _digest(resume_token), msgspec.json.encode(start).decode())
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO resumable_sessions VALUES (?, ?, ?)", row)

    def load(self, session_id: str, resume_token: str) -> p.SessionStart | None:
        """The session's ``session.start`` if the token is its own, else None."""
        with self._lock:
            row = self._db.execute(
                "SELECT token_sha256, start FROM resumable_sessions WHERE session_id = ?", (session_id,)
            ).fetchone()
        if row is None or not hmac.compare_digest(row[0], _digest(resume_token)):
            return None
        return msgspec.json.decode(row[1], type=p.SessionStart)


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()
