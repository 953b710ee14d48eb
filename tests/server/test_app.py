"""The live server over a real WebSocket on loopback: every rule of PROTOCOL.md, sessions end to end."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
import urllib.request

import pytest
import websockets

from server.app import OnstageServer
from server.auth import make_token
from server.client import SessionClient
from server.limits import Limits
from tests.support.observe import (
    arrived,
    chunks_by,
    last_reflecting_chunk,
    metrics_text,
    seen_chunk,
    session_figures,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")


def http_get(server: OnstageServer, path: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}{path}", timeout=5) as r:
            return r.status, r.headers["Content-Type"], r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], e.read()


async def test_the_same_port_serves_the_page_health_and_metrics(server: OnstageServer) -> None:
    status, kind, body = await asyncio.to_thread(http_get, server, "/")
    assert status == 200 and kind.startswith("text/html") and b"<canvas" in body
    status, kind, body = await asyncio.to_thread(http_get, server, "/static/app.js")
    assert status == 200 and b"session.start" in body
    status, _, body = await asyncio.to_thread(http_get, server, "/healthz")
    assert status == 200 and json.loads(body)["status"] == "ok"
    status, kind, body = await asyncio.to_thread(http_get, server, "/metrics")
    assert status == 200 and kind.startswith("text/plain") and b"onstage_sessions " in body
    assert (await asyncio.to_thread(http_get, server, "/static/../app.py"))[0] == 404


async def test_the_page_camera_models_are_served_from_where_set_up_installed_them(
    server: OnstageServer,
) -> None:
    status, kind, body = await asyncio.to_thread(http_get, server, "/static/vendor/hands/hands.js")
    assert status == 200 and kind == "text/javascript" and b"Hands" in body
    status, kind, body = await asyncio.to_thread(
        http_get, server, "/static/vendor/hands/hands_solution_simd_wasm_bin.wasm"
    )
    assert status == 200 and kind == "application/wasm" and body[:4] == b"\0asm"
    status, kind, _ = await asyncio.to_thread(
        http_get, server, "/static/vendor/face_detection/face_detection_short_range.tflite"
    )
    assert status == 200 and kind == "application/octet-stream"
    for path in (
        "/static/vendor/hands/../../app.js",
        "/static/vendor/hands/package.json/x",
        "/static/vendor/pose/pose.js",
    ):
        assert (await asyncio.to_thread(http_get, server, path))[0] == 404, path


async def test_a_session_streams_frames_and_audio_on_the_media_clock(url: str) -> None:
    async with SessionClient(url) as client:
        started = await client.start(seed=3)
        assert started["protocol"] == 1 and started["fps"] == 24 and started["chunk_frames"] == 4
        assert started["audio_in_rate"] == 16000 and started["audio_out_rate"] == 24000
        assert "wave" in started["capabilities"]["actions"]
        await client.wait_frame(lambda f: f.header["chunk"] >= 8, timeout=20)
        frames = client.received.video
        assert [f.header["seq"] for f in frames] == sorted(f.header["seq"] for f in frames)
        for a, b in itertools.pairwise(frames):
            assert b.header["pts_ms"] == pytest.approx(a.header["pts_ms"] + 1000 / 24, abs=0.01)
        assert frames[0].jpeg[:2] == b"\xff\xd8"
        assert all(a.header["samples"] == 1000 and len(a.pcm) == 2000 for a in client.received.audio)
        # Sent at presentation time, not in bursts ahead of it, give or take one chunk (the first one may
        # be that late): 8 chunks take 8 chunk times to arrive, less at most one.
        span = frames[32].t - frames[0].t
        assert span >= (32 - started["chunk_frames"]) / started["fps"]
        # The server says when it sent each frame: in order, and paced as the arrivals are.
        sent = [f.header["sent_ms"] for f in frames]
        assert sent == sorted(sent)
        assert sent[32] - sent[0] >= 1000 * (32 - started["chunk_frames"]) / started["fps"]


async def test_metrics_count_a_live_sessions_chunks_and_time_their_generation(
    server: OnstageServer, url: str
) -> None:
    async with SessionClient(url) as client:
        opened = time.monotonic()
        started = await client.start(seed=4)
        await client.wait_frame(lambda f: f.header["chunk"] >= 6, timeout=20)
        asked = time.monotonic()
        body = await asyncio.to_thread(metrics_text, server.port)
        answered = time.monotonic()
        await client.wait_frame(lambda f: f.t > answered)
    lines = session_figures(body, started["session_id"])
    # A chunk is counted as the sender takes it, just before its first frame leaves: the count lies between
    # the chunks the client had when it asked and those it had by the answer, plus the one being taken.
    received, sent = client.received, lines["chunks_sent_total"]
    assert chunks_by(received, asked) <= sent <= chunks_by(received, answered) + 1
    assert lines["chunks_on_time_total"] <= sent
    assert lines["on_time"] == pytest.approx(lines["chunks_on_time_total"] / sent)
    # Generation times in seconds: one worker generated the chunks one after another, at least half of
    # them taking the median or longer, all within the session's life so far.
    p50, p99 = lines["chunk_seconds0.5"], lines["chunk_seconds0.99"]
    assert 0 < p50 <= p99 <= answered - opened
    assert p50 * (sent // 2) <= answered - opened


async def test_the_first_message_must_be_session_start(url: str) -> None:
    async with SessionClient(url) as client:
        assert client.ws is not None
        await client.send({"type": "ping", "ref": "early"})
        error = await client.wait_type("error")
        assert (error["code"], error["ref"], error["fatal"]) == ("not_started", "early", False)
        await client.ws.send(b"\x01\x00\x00")
        await client.wait_for(lambda m: m.get("code") == "not_started" and "ref" not in m)
        await client.start()


async def test_malformed_messages_get_an_error_and_change_nothing(url: str) -> None:
    async with SessionClient(url) as client:
        assert client.ws is not None
        await client.start()
        await client.ws.send("{oops")
        await client.send({"type": "teleport", "ref": "t"})
        await client.send({"type": "input.gesture", "gesture": "moonwalk", "ref": "g"})
        await client.send({"type": "input.text", "ref": "x"})
        await client.ws.send(b"\x01\x00")  # odd byte count
        await client.ws.send(b"\x07abc")  # not a client kind
        await client.send({"type": "input.text", "text": "a" * 70_000, "ref": "big"})
        await client.wait_for(lambda m: len(client.received.of_type("error")) >= 7)
        got = [(e["code"], e.get("ref")) for e in client.received.of_type("error")]
        assert ("bad_json", None) in got and ("unknown_type", "t") in got and ("bad_field", "g") in got
        assert ("bad_field", "x") in got and ("too_large", "big") in got
        assert sum(1 for code, _ in got if code == "bad_field") >= 4
        assert not any(e["fatal"] for e in client.received.of_type("error"))
        await client.send({"type": "ping", "ref": "still"})
        assert (await client.wait_type("pong"))["ref"] == "still"


async def test_a_message_over_one_mib_closes_the_connection_with_1009(url: str) -> None:
    async with SessionClient(url) as client:
        await client.start()
        assert client.ws is not None and client._reader is not None
        await client.ws.send("x" * (1024 * 1024 + 10))
        await asyncio.wait_for(client._reader, 10)
        assert client.ws.close_code == 1009


async def test_a_flood_of_messages_is_rate_limited_without_closing(server: OnstageServer, url: str) -> None:
    limits = server.limits
    flood = 3 * round(limits.message_burst)
    async with SessionClient(url) as client:
        await client.start()
        # session.start took a token: the bucket is full again (the burst the bounds below count on) only
        # once it has refilled; a session that started within 1 / messages_per_s left it one short.
        await asyncio.sleep(1 / limits.messages_per_s)
        began = time.monotonic()
        for i in range(flood):
            await client.send({"type": "ping", "ref": str(i)})

        def answers() -> tuple[int, int]:
            pongs = sum(1 for m in client.received.of_type("pong") if m["ref"].isdigit())
            refused = sum(1 for m in client.received.of_type("error") if m["code"] == "rate_limited")
            return pongs, refused

        # Every message is answered: a pong while tokens last, a rate_limited error once they are gone.
        await client.wait_for(lambda m: sum(answers()) == flood)
        ended = time.monotonic()
        pongs, refused = answers()
        assert (
            refused >= 1
            and limits.message_burst
            <= pongs
            <= limits.message_burst + limits.messages_per_s * (ended - began)
        )
        # The bucket refills at messages_per_s: a token is back after 1 / messages_per_s.
        await asyncio.sleep(1 / limits.messages_per_s)
        await client.send({"type": "ping", "ref": "after"})
        await client.wait_type("pong", ref="after")
        assert not any(e["fatal"] for e in client.received.of_type("error"))


async def test_a_gesture_is_accepted_and_a_later_frame_reflects_it(server: OnstageServer, url: str) -> None:
    async with SessionClient(url) as client:
        await client.start(seed=5)
        await client.wait_frame(lambda f: f.header["chunk"] >= 2)
        sent = await client.send({"type": "input.gesture", "gesture": "wave", "ref": "w"})
        accepted = await client.wait_type("input.accepted", ref="w")
        assert accepted["kind"] == "gesture"
        frame = await client.wait_frame(lambda f: accepted["event_id"] in f.header["reflects"])
        # The first reflecting frame opens a chunk nobody had seen when the gesture was sent, and one the
        # generation's lead reaches in time.
        received, lead = client.received, server.factory.conductor.lead(server.factory.workers.manifest)
        latest = last_reflecting_chunk(seen_chunk(received, arrived(received, accepted)), lead)
        assert frame.header["frame"] == 0
        assert seen_chunk(received, sent) < frame.header["chunk"] <= latest


async def test_resume_continues_the_same_session_from_the_current_chunk(url: str) -> None:
    async with SessionClient(url) as first:
        started = await first.start(seed=9)
        await first.wait_frame(lambda f: f.header["chunk"] >= 3)
    async with SessionClient(url) as bad:
        await bad.send(
            {"type": "session.start", "resume": {"session_id": started["session_id"], "resume_token": "no"}}
        )
        assert (await bad.wait_type("error"))["code"] == "resume_failed"
    async with SessionClient(url) as again:
        resume = {"session_id": started["session_id"], "resume_token": started["resume_token"]}
        back = await again.start(resume=resume)
        assert back["session_id"] == started["session_id"]
        frame = await again.wait_frame(lambda f: True)
        # The same session goes on from where its media clock is now: its frames do not start again at 0.
        assert frame.header["pts_ms"] > first.received.video[-1].header["pts_ms"]


async def test_a_dropped_session_is_freed_after_the_grace_period(server: OnstageServer, url: str) -> None:
    async with SessionClient(url) as client:
        started = await client.start()
        dropped = time.monotonic()
    assert started["session_id"] in server.sessions
    grace = server.limits.resume_grace_s
    async with asyncio.timeout(grace + 10):
        while started["session_id"] in server.sessions:  # noqa: ASYNC110 (the server's table has no event)
            await asyncio.sleep(grace / 10)
    assert time.monotonic() - dropped >= grace


async def test_two_sessions_run_side_by_side_and_bad_input_in_one_leaves_the_other_alone(url: str) -> None:
    async with SessionClient(url) as a, SessionClient(url) as b:
        await a.start(seed=1)
        await b.start(seed=2)
        before = len(b.received.video)
        assert a.ws is not None
        for _ in range(20):
            await a.ws.send("{broken")
        await a.wait_for(lambda m: len(a.received.of_type("error")) >= 20)
        await b.wait_frame(lambda f: f.header["chunk"] >= 6)
        assert len(b.received.video) > before and not b.received.of_type("error")


async def test_the_server_refuses_a_session_beyond_its_capacity(factory) -> None:
    srv = OnstageServer(factory, Limits(max_sessions=1))
    await srv.start("127.0.0.1", 0)
    try:
        url = f"ws://127.0.0.1:{srv.port}/v1/session"
        async with SessionClient(url) as a, SessionClient(url) as b:
            await a.start()
            with pytest.raises(RuntimeError, match="capacity"):
                await b.start()
            assert b.received.of_type("error")[0]["fatal"] is True
    finally:
        await srv.close()


async def test_with_a_token_secret_a_client_needs_a_valid_token(factory) -> None:
    srv = OnstageServer(factory, Limits(admission="ceiling", max_sessions=2), token_secret="s3cret")
    await srv.start("127.0.0.1", 0)
    try:
        url = f"ws://127.0.0.1:{srv.port}/v1/session"
        for token in (None, "123.abc", make_token("other", 60), make_token("s3cret", -10)):
            with pytest.raises(websockets.InvalidStatus) as err:
                async with SessionClient(url, token=token):
                    pass
            assert err.value.response.status_code == 401
        async with SessionClient(url, token=make_token("s3cret", 60)) as client:
            await client.start()
        # Another token (one token holds one live session, and the first is still waiting out its grace).
        async with SessionClient(f"{url}?token={make_token('s3cret', 61)}") as client:
            await client.start()
    finally:
        await srv.close()


async def test_the_same_seed_and_no_input_give_the_same_frames_byte_for_byte(url: str) -> None:
    runs, spoke = [], []
    for _ in range(2):
        async with SessionClient(url) as client:
            await client.start(seed=21)
            await client.wait_frame(lambda f: f.header["chunk"] >= 16, timeout=30)
            runs.append([f.jpeg for f in client.received.video if f.header["chunk"] < 16])
            spoke.append(client.received.of_type("character.speech"))
    assert len(runs[0]) == len(runs[1]) == 64
    assert spoke[0] and spoke[0][0]["state"] == "started"  # the greeting speaks: the mouth is in the frames
    assert runs[0] == runs[1]
    async with SessionClient(url) as other:
        await other.start(seed=22)
        await other.wait_frame(lambda f: f.header["chunk"] >= 6, timeout=20)
        assert [f.jpeg for f in other.received.video if f.header["chunk"] < 6] != runs[0][:24]
