"""Front ends to the test cluster's slots, and what several test modules here wait for and check of the
sessions they serve (the fixtures themselves are in ``conftest``)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from ray.cluster_utils import Cluster

from server.app import OnstageServer
from server.client import SessionClient
from server.cluster.remote import RaySlots
from server.cluster.settings import ClusterSettings

LEASE_S = 5.0
"""The front ends' leases in this process: every test longer than this shows that they renew them."""


async def front_end(cluster: Cluster) -> RaySlots:
    """A front end of its own to the slots (they are found by name: the first made them)."""
    return await asyncio.to_thread(
        RaySlots.connect, ClusterSettings(address="auto", lease_s=LEASE_S), "tiny", {}
    )


def url_of(srv: OnstageServer) -> str:
    return f"ws://127.0.0.1:{srv.port}/v1/session"


async def until_no_sessions(srv: OnstageServer, timeout: float = 60.0) -> None:
    """Wait for the server to have ended every session (their grace over) and their slots to be free (a
    session leaves the server's books before its worker has closed)."""
    slots = srv.factory.workers
    assert isinstance(slots, RaySlots)
    deadline = time.monotonic() + timeout
    while srv.sessions or await slots.held():
        assert time.monotonic() < deadline, f"sessions still open: {list(srv.sessions)}"
        await asyncio.sleep(0.05)


async def hung_up(client: SessionClient, timeout: float = 30.0) -> tuple[int | None, str | None]:
    """Wait for the server to close ``client``'s connection; its close code and reason."""
    assert client.ws is not None
    await asyncio.wait_for(client.ws.wait_closed(), timeout)
    return client.ws.close_code, client.ws.close_reason


def resume_of(started: dict[str, Any]) -> dict[str, str]:
    return {"session_id": started["session_id"], "resume_token": started["resume_token"]}


def assert_continues_exactly(
    client: SessionClient, reference: dict[tuple[int, int], bytes], since: int, chunks: int
) -> None:
    """Every frame ``client`` got of generator chunks ``since`` to ``since + chunks - 1`` is the reference's
    (and at least ``chunks`` // 2 of those chunks came: a loaded machine may drop some media)."""
    got = {
        (f.header["gen_chunk"], f.header["frame"]): f.jpeg
        for f in client.received.video
        if since <= f.header["gen_chunk"] < since + chunks
    }
    assert len({c for c, _ in got}) >= chunks // 2, sorted(got)
    differing = sorted(key for key, jpeg in got.items() if jpeg != reference[key])
    assert not differing, f"frames (gen_chunk, frame) {differing} differ from the same seed's in process"
