"""Who may use a server, from where, with what: Host and Origin, strict tokens, /metrics, sessions per token.

Every test talks to a real server on loopback. Requests whose headers a browser or websockets would not
let us forge (a foreign Host, a second Authorization, bytes outside ASCII) go over a raw socket.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import socket
import time
import urllib.parse
from collections.abc import AsyncIterator, Sequence

import pytest
import pytest_asyncio
import websockets
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from server.access import Access
from server.app import OnstageServer
from server.auth import _sign, check_token, make_token
from server.cli import build_parser, main
from server.client import SessionClient
from server.limits import Limits
from server.responses import PAGE_FILES
from server.serve_cli import serve_config
from server.sessions import SessionFactory

# The servers are module fixtures: async tests run on the module's loop (the sync ones need no loop).
on_module_loop = pytest.mark.asyncio(loop_scope="module")

SECRET = "s3cret"


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def guarded(factory: SessionFactory) -> AsyncIterator[OnstageServer]:
    """A server with a token secret, an extra allowed host and origin, and one session per token."""
    access = Access(allowed_hosts=("stage.example",), allowed_origins=("https://app.example",))
    srv = OnstageServer(
        factory, Limits(admission="ceiling", max_sessions=6, resume_grace_s=0.5), SECRET, access
    )
    await srv.start("127.0.0.1", 0)
    yield srv
    await srv.close()


def raw_get(
    port: int, path: str, headers: Sequence[tuple[str, bytes]], upgrade: bool = False
) -> tuple[int, bytes]:
    """Status and body of one GET with exactly ``headers`` (latin-1 bytes as sent); blocking."""
    lines = [f"GET {path} HTTP/1.1".encode()] + [name.encode() + b": " + value for name, value in headers]
    if upgrade:
        key = base64.b64encode(os.urandom(16))
        lines += [b"Upgrade: websocket", b"Connection: Upgrade", b"Sec-WebSocket-Version: 13"]
        lines.append(b"Sec-WebSocket-Key: " + key)
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        s.sendall(b"\r\n".join(lines) + b"\r\n\r\n")
        data = b""
        while b"\r\n\r\n" not in data and (chunk := s.recv(65536)):
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 101"):
            length = int(next(v for k, _, v in _fields(head) if k.lower() == b"content-length"))
            while len(body) < length and (chunk := s.recv(65536)):
                body += chunk
    return int(head.split(b" ", 2)[1]), body


def _fields(head: bytes) -> list[tuple[bytes, bytes, bytes]]:
    return [line.partition(b": ") for line in head.split(b"\r\n")[1:]]


def own(port: int) -> tuple[str, bytes]:
    return ("Host", f"127.0.0.1:{port}".encode())


async def get(port: int, path: str, *headers: tuple[str, bytes], upgrade: bool = False) -> tuple[int, bytes]:
    return await asyncio.to_thread(raw_get, port, path, headers, upgrade)


async def started_with(url: str, **connect: object) -> dict:
    """Open ``url`` with websockets (``connect`` passed on) and start a session; its ``session.started``."""
    async with websockets.connect(url, **connect) as ws:  # type: ignore[arg-type]
        await ws.send('{"type": "session.start"}')
        return json.loads(await asyncio.wait_for(ws.recv(), 30))


# ------------------------------------------------------------------------------ Host and Origin


@on_module_loop
async def test_a_page_of_another_site_cannot_open_a_session(server: OnstageServer, url: str) -> None:
    for origin in ("http://evil.example", "http://127.0.0.1.evil.example:80", "null"):
        with pytest.raises(websockets.InvalidStatus) as err:
            await started_with(url, origin=origin)
        assert err.value.response.status_code == 403
        assert b"another origin" in err.value.response.body


@on_module_loop
async def test_the_servers_own_page_and_clients_without_an_origin_start_sessions(
    server: OnstageServer, url: str
) -> None:
    port = server.port
    for origin in (None, f"http://127.0.0.1:{port}", f"http://localhost:{port}", f"HTTP://LOCALHOST:{port}"):
        started = await started_with(url, origin=origin)
        assert started["type"] == "session.started", origin


@on_module_loop
async def test_a_foreign_host_is_refused_for_the_page_health_metrics_and_the_socket(
    server: OnstageServer,
) -> None:
    """DNS rebinding: a page of evil.example resolved to 127.0.0.1 is same-origin to itself, sends no
    Origin on a GET, but must name its own host."""
    port = server.port
    for path, upgrade in (("/", False), ("/healthz", False), ("/metrics", False), ("/v1/session", True)):
        for host in (f"evil.example:{port}", "127.0.0.1", f"127.0.0.1:{port + 1}", ""):
            status, body = await get(port, path, ("Host", host.encode()), upgrade=upgrade)
            assert (status, body) == (403, b"forbidden: this server does not answer to that Host\n")
        twice = await get(port, path, own(port), ("Host", b"evil.example"), upgrade=upgrade)
        assert twice[0] == 403
        for host in (f"localhost:{port}", f"[::1]:{port}", f"127.0.0.1:{port}"):
            status, _ = await get(port, path, ("Host", host.encode()), upgrade=upgrade)
            assert status == (101 if upgrade else 200), (path, host)


@on_module_loop
async def test_allowed_hosts_and_origins_add_to_the_defaults(guarded: OnstageServer) -> None:
    port, bearer = guarded.port, ("Authorization", f"Bearer {make_token(SECRET, 60)}".encode())
    at_stage = ("Host", b"stage.example")
    for origin in (b"https://app.example", b"https://stage.example", b"http://stage.example"):
        assert (await get(port, "/v1/session", at_stage, ("Origin", origin), bearer, upgrade=True))[0] == 101
    for origin in (b"https://evil.example", b"http://app.example", f"http://stage.example:{port}".encode()):
        assert (await get(port, "/", at_stage, ("Origin", origin)))[0] == 403
    assert (await get(port, "/", ("Host", b"stage.example:8443")))[0] == 403


# ------------------------------------------------------------------------------ tokens


def strange_tokens() -> list[str]:
    arabic = "١٧٩٩٩٩٩٩٩٩"  # Arabic-Indic digits: int() reads them as 1799999999
    return [
        "é" * 10,
        f"{int(time.time()) + 60}.{'é' * 64}",
        f"{'9' * 5000}.{'0' * 64}",
        f"{arabic}.{_sign(SECRET, int(arabic))}",
        "0" + make_token(SECRET, 60),  # the same expiry with a leading zero
        make_token(SECRET, 60).upper(),
        f" {make_token(SECRET, 60)}x",
    ]


def test_check_token_is_strict_and_never_raises() -> None:
    assert check_token(SECRET, make_token(SECRET, 60))
    for token in strange_tokens():
        assert check_token(SECRET, token) is False, token


# Any text, and text shaped like a token: digits of any script, a dot, anything.
TOKEN_LIKE = st.one_of(
    st.text(), st.tuples(st.text(st.characters(categories=["Nd"]), min_size=1), st.text()).map(".".join)
)


@given(TOKEN_LIKE)
def test_any_string_as_a_token_is_true_or_false(text: str) -> None:
    assert check_token(SECRET, text) in (True, False)


@given(st.integers(min_value=0, max_value=80), st.characters())
def test_a_token_changed_by_one_character_is_refused(at: int, char: str) -> None:
    token = make_token(SECRET, 600)
    for changed in (token[:at] + char + token[at:], token[:at] + char + token[at + 1 :]):
        assert check_token(SECRET, changed) is (changed == token)


@on_module_loop
async def test_every_bad_token_gets_401_and_never_500(guarded: OnstageServer) -> None:
    port = guarded.port
    for token in strange_tokens():
        raw = token.encode("utf-8")
        assert (await get(port, "/v1/session", own(port), ("Authorization", b"Bearer " + raw), upgrade=True))[
            0
        ] == 401
        quoted = urllib.parse.quote(token, safe=".")
        assert (await get(port, f"/v1/session?token={quoted}", own(port), upgrade=True))[0] == 401
    good = f"Bearer {make_token(SECRET, 60)}".encode()
    twice = await get(port, "/metrics", own(port), ("Authorization", good), ("Authorization", good))
    assert twice[0] == 401


def test_make_token_refuses_an_expiry_it_could_not_write(capsys: pytest.CaptureFixture[str]) -> None:
    for ttl in ("inf", "nan", "1e20", "-1e12"):
        assert main(["token", "--secret", SECRET, f"--ttl={ttl}"]) == 2
        assert "onstage token: a ttl of" in capsys.readouterr().err
    assert main(["token", "--secret", SECRET, "--ttl", "60"]) == 0
    assert check_token(SECRET, capsys.readouterr().out.strip())


@on_module_loop
async def test_a_resume_token_outside_ascii_is_resume_failed(url: str) -> None:
    async with SessionClient(url) as first:
        started = await first.start()
    async with SessionClient(url) as again:
        resume = {"session_id": started["session_id"], "resume_token": "é" + started["resume_token"][1:]}
        await again.send({"type": "session.start", "resume": resume})
        error = await again.wait_type("error")
        assert (error["code"], error["fatal"]) == ("resume_failed", False)


# ------------------------------------------------------------------------------ what is open


@on_module_loop
async def test_with_a_token_secret_metrics_need_a_token(guarded: OnstageServer) -> None:
    port, token = guarded.port, make_token(SECRET, 60)
    status, body = await get(port, "/metrics", own(port))
    assert (status, body) == (401, b"unauthorized: missing or bad token\n")
    assert (await get(port, "/metrics", own(port), ("Authorization", b"Bearer nope")))[0] == 401
    status, body = await get(port, "/metrics", own(port), ("Authorization", f"Bearer {token}".encode()))
    assert status == 200 and b"onstage_sessions " in body
    assert (await get(port, f"/metrics?token={token}", own(port)))[0] == 200
    assert (await get(port, "/healthz", own(port)))[0] == 200


@on_module_loop
async def test_one_token_holds_one_live_session_and_its_resume_still_works(guarded: OnstageServer) -> None:
    url, token = f"ws://127.0.0.1:{guarded.port}/v1/session", make_token(SECRET, 600)
    async with SessionClient(url, token=token) as first:
        started = await first.start()
        async with SessionClient(url, token=token) as second:
            with pytest.raises(RuntimeError, match="rate_limited"):
                await second.start()
            error = second.received.of_type("error")[0]
            assert error["fatal"] is True and "this token already holds 1 live session" in error["message"]
        async with SessionClient(url, token=make_token(SECRET, 601)) as other:
            await other.start()
    # Dropped, the session waits out its grace: it still counts, and its resume token brings it back.
    async with SessionClient(url, token=token) as fresh:
        with pytest.raises(RuntimeError, match="rate_limited"):
            await fresh.start()
    async with SessionClient(url, token=token) as back:
        resume = {"session_id": started["session_id"], "resume_token": started["resume_token"]}
        assert (await back.start(resume=resume))["session_id"] == started["session_id"]
    await wait_until(lambda: started["session_id"] not in guarded.sessions)
    async with SessionClient(url, token=token) as later:
        await later.start()


@on_module_loop
async def test_sessions_per_token_holds_when_sessions_start_at_once(factory: SessionFactory) -> None:
    srv = OnstageServer(
        factory, Limits(admission="ceiling", max_sessions=6), SECRET, Access(sessions_per_token=2)
    )
    await srv.start("127.0.0.1", 0)
    url, token = f"ws://127.0.0.1:{srv.port}/v1/session", make_token(SECRET, 600)
    try:
        async with contextlib.AsyncExitStack() as stack:
            clients = [await stack.enter_async_context(SessionClient(url, token=token)) for _ in range(4)]
            answers = await asyncio.gather(*(c.start() for c in clients), return_exceptions=True)
            refused = [a for a in answers if isinstance(a, RuntimeError)]
            assert len(refused) == 2 and all("rate_limited" in str(a) for a in refused)
            assert sum(s.token == token for s in srv.sessions.values()) == 2
    finally:
        await srv.close()


async def wait_until(condition, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


# ------------------------------------------------------------------------------ any header value


HEADER_TEXT = st.text(st.sampled_from(["\t", *map(chr, range(0x20, 0x7F)), *map(chr, range(0x80, 0x100))]))


@on_module_loop
async def test_any_header_value_is_answered_with_a_status_and_never_500(guarded: OnstageServer) -> None:
    port, token = guarded.port, make_token(SECRET, 600)
    hosts = {f"{name}:{port}" for name in ("127.0.0.1", "localhost", "[::1]")} | {"stage.example"}
    origins = {f"{s}://{h}" for h in hosts for s in ("http", "https")} | {"https://app.example"}
    accepted = {"Host": hosts, "Origin": origins}
    valid = {
        "Host": f"127.0.0.1:{port}",
        "Origin": f"http://127.0.0.1:{port}",
        "Authorization": f"Bearer {token}",
    }

    values = st.one_of(
        HEADER_TEXT,
        HEADER_TEXT.map(lambda s: "Bearer " + s),
        st.sampled_from(sorted(hosts | origins)).map(lambda s: s.upper()),
    )

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        st.sampled_from(["Host", "Origin", "Authorization"]),
        values,
        st.sampled_from(["/", "/metrics", "/v1/session"]),
    )
    def answered(name: str, value: str, path: str) -> None:
        headers = [(k, (value if k == name else v).encode("latin-1")) for k, v in valid.items()]
        status, _ = raw_get(port, path, headers, upgrade=path == "/v1/session")
        sent = value.strip(" \t")  # as the HTTP parser does
        bearer = sent[7:].strip(" \t") if sent.lower().startswith("bearer ") else None
        if name in accepted and sent.lower() not in accepted[name]:
            expected = 403
        elif name == "Authorization" and path != "/" and not check_token(SECRET, bearer):
            expected = 401
        else:
            expected = {"/": 200, "/metrics": 200, "/v1/session": 101}[path]
        assert status == expected, (name, value, path)

    await asyncio.to_thread(answered)


# ------------------------------------------------------------------------------ flags


def test_serve_flags_add_hosts_origins_and_sessions_per_token(tmp_path) -> None:
    config = tmp_path / "onstage.toml"
    config.write_text('[server.access]\nallowed_hosts = ["a.example"]\nsessions_per_token = 3\n')
    args = build_parser().parse_args(
        [
            "serve",
            "--config",
            str(config),
            "--allowed-host",
            "b.example:8765",
            "--allowed-origin",
            "https://c.example",
        ]
    )
    access = serve_config(args).access
    assert access == Access(
        allowed_hosts=("a.example", "b.example:8765"),
        allowed_origins=("https://c.example",),
        sessions_per_token=3,
    )
    args = build_parser().parse_args(["serve", "--sessions-per-token", "2"])
    assert serve_config(args).access.sessions_per_token == 2
    assert main(["serve", "--sessions-per-token", "0"]) == 2


PATH_TEXT = st.text(st.sampled_from([c for c in map(chr, range(0x7F)) if c not in " \r\n"]))


@on_module_loop
async def test_any_request_path_is_answered_and_never_500(guarded: OnstageServer) -> None:
    """A path is never used to build a file path: a NUL byte in it was a 500 (``embedded null byte``). Nor is
    it parsed as a URL: ``//[`` (a host, to a URL parser) was a 500 too."""
    port = guarded.port
    assert (await get(port, "/static/\x00app.js", own(port)))[0] == 404
    assert (await asyncio.to_thread(raw_get, port, "//[", [own(port)]))[0] == 404

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.sampled_from(["/", "/static/", "/v1/session", "/metrics"]), PATH_TEXT)
    def answered(prefix: str, rest: str) -> None:
        path = prefix + rest
        status, _ = raw_get(port, path, [own(port)])
        known = {"/": 200, "/healthz": 200, "/v1/session": 401, "/metrics": 401}
        known |= {f"/static/{name}": 200 for name in PAGE_FILES}
        assert status == known.get(path.partition("?")[0], 404), path

    await asyncio.to_thread(answered)
