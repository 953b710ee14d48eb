"""Sessions on another backend: the session's clock and picture are the backend's, every model call runs
in the model worker (never on the event loop), and what the backend cannot do is not attempted: no
replacement without rollback, and a rewind without exact snapshots is told to the client as approximate."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import AsyncIterator

import msgspec
import pytest

from server.app import OnstageServer
from server.client import SessionClient
from server.limits import Limits
from server.sessions import SessionFactory
from streaming_model.backend import Backend
from streaming_model.world_backend import WorldBackend, WorldOptions
from tests.support.backends import Recording

pytestmark = pytest.mark.asyncio(loop_scope="module")


@contextlib.asynccontextmanager
async def serving(backend: Backend, factory: SessionFactory) -> AsyncIterator[tuple[OnstageServer, str]]:
    """A server on loopback whose sessions run on ``backend`` (the shared voice and hearing)."""
    srv = OnstageServer(
        SessionFactory(backend, factory.voice, factory.hearing),
        Limits(admission="ceiling", resume_grace_s=0.2),
    )
    await srv.start("127.0.0.1", 0)
    try:
        yield srv, f"ws://127.0.0.1:{srv.port}/v1/session"
    finally:
        await srv.close()


async def test_session_started_names_the_backends_clock_and_picture(factory: SessionFactory) -> None:
    backend = WorldBackend(WorldOptions(fps=16, chunk_frames=12, width=160, height=96), warmup_chunks=1)
    async with serving(backend, factory) as (_, url), SessionClient(url) as client:
        started = await client.start(seed=1)
        assert (started["width"], started["height"], started["fps"], started["chunk_frames"]) == (
            160,
            96,
            16,
            12,
        )
        assert started["capabilities"]["actions"] == [a.name for a in backend.manifest.vocabulary.actions]


async def rewind_once(url: str) -> dict:
    """A story session: a choice, a few chunks, a rewind to the start; the story.state the rewind sent."""
    async with SessionClient(url) as client:
        await client.start(story="garden_gate", seed=3, director="script")
        first = await client.wait_type("story.state", node="gate")
        await client.send({"type": "story.choose", "choice": "wave"})
        await client.wait_type("story.state", node="porch")
        await client.wait_frame(lambda f: f.header["chunk"] >= 4, timeout=20)  # past boundaries: checkpointed
        await client.send({"type": "story.rewind", "checkpoint": first["checkpoint"], "ref": "r"})
        await client.wait_type("input.accepted", ref="r")
        back = await client.wait_for(
            lambda m: m.get("type") == "story.state" and m["node"] == "gate" and m is not first
        )
        await client.wait_frame(lambda f: f.header["gen_chunk"] == 0 and f.header["chunk"] > 0, timeout=20)
        return back


async def test_model_calls_run_in_the_worker_and_an_exact_rewind_says_so(factory: SessionFactory) -> None:
    backend = Recording(WorldBackend(warmup_chunks=1))
    loop_thread = threading.current_thread().name
    async with serving(backend, factory) as (_, url):
        back = await rewind_once(url)
    assert "approximate" not in back  # false: a field at its default is left out
    names = {name for name, _ in backend.calls}
    # Opening, checkpoints (snapshot + export) and the rewind (import + restore) happened, all off the loop.
    assert names >= {
        "open_session",
        "generate",
        "commit",
        "snapshot",
        "export_state",
        "import_state",
        "restore",
    }
    assert loop_thread not in {thread for _, thread in backend.calls}


async def test_without_rollback_or_exact_snapshots_nothing_is_replaced_and_rewinds_are_approximate(
    factory: SessionFactory,
) -> None:
    world = WorldBackend(warmup_chunks=1)
    narrow = msgspec.structs.replace(world.manifest.capabilities, rollback_depth=0, snapshots="approximate")
    backend = Recording(world, narrow)
    async with serving(backend, factory) as (srv, url):
        back = await rewind_once(url)
        assert not any(s.conductor.replaces for s in srv.sessions.values())
    assert back["approximate"] is True
    assert "rollback" not in {name for name, _ in backend.calls}
