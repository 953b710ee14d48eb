"""Through a real server on loopback: an input that comes while the next chunk is generated shows in that
chunk. Whether a generated chunk that waits unsent is generated again (or, with replacement off, sent as it
is) depends on where an input lands, which on a real clock is up to the machine's speed: that is tested in
virtual time, in tests/server/core/test_replacement.py."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from server.app import OnstageServer
from server.client import SessionClient
from server.core.conductor import ConductorConfig
from server.limits import Limits
from server.sessions import SessionFactory
from tests.support.observe import arrived, last_reflecting_chunk, seen_chunk, session_metrics

pytestmark = pytest.mark.asyncio(loop_scope="module")

ATTEMPTS = 12
"""Gestures a test sends at most before what it waits for has happened."""

GESTURES: list[dict[str, Any]] = [
    {"gesture": "wave"},
    {"gesture": "thumbs_up"},
    {"gesture": "point", "x": 0.8, "y": 0.0},
    {"gesture": "raise_hand"},
]


@contextlib.asynccontextmanager
async def serving(factory: SessionFactory, config: ConductorConfig) -> AsyncIterator[OnstageServer]:
    """A server on loopback whose sessions run with ``config``."""
    usual = factory.conductor
    factory.conductor = config
    srv = OnstageServer(factory, Limits(admission="ceiling", max_sessions=2, resume_grace_s=0.2))
    await srv.start("127.0.0.1", 0)
    try:
        yield srv
    finally:
        await srv.close()
        factory.conductor = usual


@dataclass(frozen=True)
class Shown:
    """Where a gesture sent after frame (``after``, ``frame``) arrived first showed, and whether the
    session regenerated a chunk for it meanwhile (``/metrics`` before and after)."""

    after: int
    chunk: int
    redirected: bool  # a chunk in flight was generated again
    replaced: bool  # a generated, unsent chunk was generated again

    @property
    def regenerated(self) -> bool:
        return self.redirected or self.replaced


async def gesture_after(
    client: SessionClient, server: OnstageServer, ref: str, gesture: dict[str, Any], frame: int, lead: float
) -> Shown:
    """Send ``gesture`` right after frame ``frame`` of a chunk two ahead of the newest one has arrived."""
    assert client.started is not None
    sid = client.started["session_id"]
    before = await asyncio.to_thread(session_metrics, server.port, sid)
    await client.wait_frame(lambda f: True)  # the first one
    after = client.received.video[-1].header["chunk"] + 2
    await client.wait_frame(lambda f: (f.header["chunk"], f.header["frame"]) >= (after, frame))
    sent = await client.send({"type": "input.gesture", "ref": ref, **gesture})
    accepted = await client.wait_type("input.accepted", ref=ref)
    shown = await client.wait_frame(lambda f: accepted["event_id"] in f.header["reflects"], timeout=10)
    now = await asyncio.to_thread(session_metrics, server.port, sid)
    received, chunk = client.received, shown.header["chunk"]
    latest = last_reflecting_chunk(seen_chunk(received, arrived(received, accepted)), lead)
    assert seen_chunk(received, sent) < chunk <= latest, (ref, chunk)
    return Shown(
        after,
        chunk,
        now["redirects_total"] > before["redirects_total"],
        now["replaced_total"] > before["replaced_total"],
    )


async def test_an_input_during_the_next_chunks_generation_shows_in_that_chunk(
    factory: SessionFactory,
) -> None:
    # Generating one chunk ahead, chunk c + 1 starts generating as chunk c starts playing. A gesture sent
    # when chunk c's first frame arrives comes while c + 1 is denoised (or, on a fast machine, waits to be
    # sent), with nearly a chunk left before its send: enough to generate it again with the gesture, unless
    # the session's chunk time leaves no room, when it shows in the chunk after.
    config = ConductorConfig(lead_chunks=1.0)
    lead = config.lead(factory.workers.manifest)
    async with (
        serving(factory, config) as srv,
        SessionClient(f"ws://127.0.0.1:{srv.port}/v1/session") as client,
    ):
        session = await client.start(seed=5)
        shown: list[Shown] = []
        for i in range(ATTEMPTS):
            shown.append(await gesture_after(client, srv, f"d{i}", GESTURES[i % len(GESTURES)], 0, lead))
            if sum(s.regenerated for s in shown) >= 4:
                break
        chunk_s = session["chunk_frames"] / session["fps"]
        figures = await asyncio.to_thread(session_metrics, srv.port, session["session_id"])
    assert all(s.chunk - s.after <= lead for s in shown if s.regenerated), shown
    # A chunk is generated again only while redirect_margin x its typical time is left before its send; a
    # gesture comes up to a frame after the generation began. Where that leaves room, most do.
    frame_s = 1 / session["fps"]
    if config.redirect_margin * figures["chunk_seconds0.5"] < chunk_s - frame_s:
        assert sum(s.regenerated for s in shown) >= 4, (figures, shown)
