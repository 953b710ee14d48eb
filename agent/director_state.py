"""What the Director keeps: the graph's state per session (``DirectorState``), the part of it a story
checkpoint saves (``DirectorMemory``), and its counters (``DirectorStats``)."""

from __future__ import annotations

from typing import Any, TypedDict

import msgspec


class DirectorState(TypedDict, total=False):
    """What the checkpointer keeps per session."""

    messages: list[dict[str, Any]]
    memory: list[str]
    spoken: dict[str, str]
    """Speech block id -> id of the ``say`` tool call that made it (to rewrite it to what was heard)."""
    steps: int
    spoke: bool
    final: bool
    misses: int
    """Replies in a row, up to now, without a usable tool call."""


class DirectorMemory(msgspec.Struct, frozen=True, kw_only=True):
    """What the Director keeps of a session (history, remembered facts, spoken block ids): a story
    checkpoint saves it and a rewind puts it back (see ``Director.snapshot``)."""

    messages: list[dict[str, Any]] = []
    memory: list[str] = []
    spoken: dict[str, str] = {}


class DirectorStats(msgspec.Struct):
    """Counters for tests, benchmarks and metrics."""

    runs: int = 0
    completed: int = 0
    cancelled: int = 0
    stale: int = 0
    failed: int = 0
    llm_calls: int = 0
    plans: int = 0
    unusable: int = 0
    """Runs that ended without a usable answer to what the user said (notice and acknowledgement)."""
    acknowledged: int = 0
