"""What a test can tell about a live session from outside: when a message arrived, which chunks the client
had seen by a moment, the bounds the conductor's schedule puts on a reaction, and the session's figures
on ``/metrics``. Times are the client's ``time.monotonic()``, as ``server.client`` records them."""

from __future__ import annotations

import math
import urllib.request
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from server.client import Received

Families = dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]]
"""A ``/metrics`` page's families by name: (sample name, its labels) -> value."""


def arrived(received: Received, message: dict[str, Any]) -> float:
    """When ``message`` (one of ``received.messages``) arrived."""
    return next(t for t, m in received.messages if m is message)


def seen_chunk(received: Received, t: float) -> int:
    """The latest chunk of which a frame had arrived by ``t`` (-1 before the first)."""
    return max((f.header["chunk"] for f in received.video if f.t <= t), default=-1)


def chunks_by(received: Received, t: float) -> int:
    """How many chunks a frame of which had arrived by ``t``."""
    return len({f.header["chunk"] for f in received.video if f.t <= t})


def last_reflecting_chunk(seen: int, lead_chunks: float) -> int:
    """The last chunk that may first reflect an event accepted when the client had seen chunk ``seen``.

    When the event is published, chunk j is the last handed to the sender, and generation runs at most
    ``lead_chunks`` ahead of it: the event redirects or replaces the first chunk not handed over yet if its
    deadline allows, otherwise it lands in the one after, j + lead + 1 at the latest. The acceptance
    arrives after the event was published, by when the client has seen chunk j - 1 at least (j's first
    frame leaves up to HANDOFF_S after the handover).
    """
    return seen + 1 + math.ceil(lead_chunks) + 1


def metrics_text(port: int) -> str:
    """The server's ``/metrics`` page (blocking: call it in a thread)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return response.read().decode()


def families(text: str) -> Families:
    """Every family by name: (sample name, its labels) -> value."""
    return {
        family.name: {(s.name, tuple(sorted(s.labels.items()))): s.value for s in family.samples}
        for family in text_string_to_metric_families(text)
    }


def observations(before: Families, after: Families, family: str) -> dict[str, float]:
    """How many observations of a histogram without labels were added to each bucket (by ``le``), and to
    ``count`` (and ``sum``, where it is given), between two scrapes."""
    added: dict[str, float] = {}
    for (name, labels), value in after[family].items():
        key = dict(labels).get("le", name.removeprefix(family + "_"))
        added[key] = value - before.get(family, {}).get((name, labels), 0.0)
    return added


def session_figures(text: str, session_id: str) -> dict[str, float]:
    """One session's ``onstage_session_*`` figures in a ``/metrics`` page (read with Prometheus' own
    parser), by sample name without the prefix, a quantile's appended (``chunk_seconds0.5``)."""
    return {
        sample.name.removeprefix("onstage_session_") + sample.labels.get("quantile", ""): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("onstage_session_") and sample.labels.get("session") == session_id
    }


def session_metrics(port: int, session_id: str) -> dict[str, float]:
    """One session's figures on ``/metrics`` now (blocking: call it in a thread)."""
    return session_figures(metrics_text(port), session_id)
