"""``benchmarks/served.py``, what every benchmark reads a live server through: a real ``onstage serve`` in
a process of its own, and each live session's figures from its ``/metrics``, the server's own gauges
(``onstage_session_cores``: the price of a session, no session's figure) left out."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from server.client import SessionClient

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))  # the benchmarks' own module layout
from served import served, session_counters, session_url, sessions_counters

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def base() -> AsyncIterator[str]:
    async with served() as url:
        yield url


async def test_each_live_session_s_figures_are_read_by_its_id_and_none_without_a_session(base: str) -> None:
    assert await asyncio.to_thread(sessions_counters, base) == {}
    assert await asyncio.to_thread(session_counters, base) == {}
    async with SessionClient(session_url(base)) as client:
        started = await client.start(seed=1)
        await client.wait_frame(lambda f: f.header["chunk"] >= 6, timeout=30)
        by_session = await asyncio.to_thread(sessions_counters, base)
        assert list(by_session) == [started["session_id"]]
        figures = await asyncio.to_thread(session_counters, base)  # read later: the same figures, grown
        assert figures.keys() == by_session[started["session_id"]].keys()
        assert figures["chunks_sent_total"] >= 6
        assert figures["chunks_on_time_total"] <= figures["chunks_sent_total"]
        assert "chunk_seconds_q0.5" in figures and "cores" not in figures
