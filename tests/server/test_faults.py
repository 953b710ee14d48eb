"""Connection faults: clients that vanish mid-handshake, right after ``session.start``, while sending audio,
and connections that stop reading. The server keeps what it holds for them bounded, frees their slots, and
a bystander session streams on throughout."""

from __future__ import annotations

import asyncio
import socket

import numpy as np
import pytest

from server.app import OnstageServer
from server.backlog import kernel_send_queue
from server.client import SessionClient
from server.limits import Limits
from server.outbox import Outbox
from tests.support.serving import serving, until
from tests.support.slow_client import SlowClient

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def streams_on(client: SessionClient, chunks: int = 6) -> None:
    """The client's session goes on: ``chunks`` more chunks arrive."""
    now = client.received.video[-1].header["chunk"] if client.received.video else 0
    await client.wait_frame(lambda f: f.header["chunk"] >= now + chunks, timeout=30)


def abort(client: SessionClient) -> None:
    """Vanish: drop the TCP connection without a WebSocket close (a reset, as a lost phone would)."""
    assert client.ws is not None
    client.ws.transport.abort()


async def test_clients_vanishing_mid_handshake_or_right_after_starting_free_their_slot(factory) -> None:
    async with serving(factory, Limits(admission="ceiling", max_sessions=2, resume_grace_s=60)) as (srv, url):
        async with SessionClient(url) as bystander:
            await bystander.start(seed=1)
            host, port = "127.0.0.1", srv.port
            for request in (b"", b"GET /v1/session HTTP/1.1\r\nHost: x\r\nUpgrade: webs"):
                with socket.create_connection((host, port)) as raw:  # half a handshake, then gone
                    raw.sendall(request)
            for _ in range(3):
                upgraded = SessionClient(url)
                await upgraded.__aenter__()  # the upgrade completes, then the client vanishes
                abort(upgraded)
                starter = SessionClient(url)
                await starter.__aenter__()
                await starter.send({"type": "session.start", "seed": 2})
                abort(starter)  # before session.started can reach it
            await streams_on(bystander)
            async with SessionClient(url) as newcomer:
                await newcomer.start(seed=3)  # was refused: a vanished starter held the slot
                await streams_on(newcomer, 2)
            await until(lambda: srv.live_count() == 1)  # the bystander's; the vanished hold none
            assert not bystander.received.of_type("error")


async def test_a_client_vanishing_while_sending_audio_leaves_a_session_that_resumes(factory) -> None:
    async with serving(factory, Limits(admission="ceiling", max_sessions=2, resume_grace_s=60)) as (srv, url):
        async with SessionClient(url) as bystander:
            await bystander.start(seed=1)
            talker = SessionClient(url)
            await talker.__aenter__()
            started = await talker.start(seed=4)
            tone = (8000 * np.sin(np.arange(320) * 2 * np.pi * 220 / 16000)).astype("<i2").tobytes()
            for _ in range(50):  # a second of audio, 20 ms frames at real time, then the link dies
                await talker.send_audio(tone)
                await asyncio.sleep(0.02)
            abort(talker)
            live = srv.sessions[started["session_id"]]
            await until(lambda: live.outbox is None)
            await streams_on(bystander)
            resume = {"session_id": started["session_id"], "resume_token": started["resume_token"]}
            async with SessionClient(url) as back:
                await back.start(resume=resume)
                await streams_on(back, 2)
            assert not bystander.received.of_type("error")


async def test_a_connection_that_stops_reading_holds_bounded_memory_and_leaves_others_alone(factory) -> None:
    async with serving(factory, Limits(admission="ceiling", max_sessions=2)) as (srv, url):
        async with SessionClient(url) as bystander, SlowClient(url, rate=1) as stalled:
            await bystander.start(seed=1)
            await stalled.send({"type": "session.start", "seed": 5})
            await until(lambda: len(srv.sessions) == 2)
            (live,) = [s for s in srv.sessions.values() if s.outbox is not bystander_outbox(srv, bystander)]
            assert isinstance(live.outbox, Outbox)  # a WebSocket client's connection
            transport = live.outbox.ws.transport
            before, chunks_before = live.outbox.dropped, live.conductor.chunks_sent
            await streams_on(bystander, 18)  # 3 s of the call: 144 media frames for the stalled client
            pending = transport.get_write_buffer_size() + kernel_send_queue(transport)
            # What it was sent before it stalled, and a few control messages: not the call's 3 s (~500 KB).
            assert pending < 64 * 1024, pending
            # Its media meanwhile (a video and an audio frame per frame: fewer on a loaded machine) was
            # dropped, all but what one queue holds and the chunk written before the socket filled.
            per_chunk = live.conductor.clock.chunk_frames * 2
            made = (live.conductor.chunks_sent - chunks_before) * per_chunk
            kept = Limits().media_queue_frames + per_chunk
            assert made > kept and live.outbox.dropped - before >= made - kept, made
            assert not bystander.received.of_type("error")


def bystander_outbox(srv: OnstageServer, client: SessionClient):
    assert client.started is not None
    return srv.sessions[client.started["session_id"]].outbox
