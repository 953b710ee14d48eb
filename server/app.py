"""The WebSocket server: one port for the session endpoint, the browser page, health and metrics.

Routes: ``/v1/session`` (WebSocket, PROTOCOL.md), ``/v1/rtc`` (WebRTC signalling: ``server.webrtc``),
``/`` and ``/static/*`` (the browser page), ``/healthz`` (JSON), ``/metrics`` (Prometheus text). Every
request must name this server in ``Host`` and, if it carries an ``Origin``, come from this server's page
(``server.access``): else HTTP 403. With a token secret configured, ``/v1/session``, ``/v1/rtc`` and
``/metrics`` need a valid token (HTTP 401 before any session exists), and one token holds at most
``Access.sessions_per_token`` live sessions at once. A client on either transport is served by the same
loop (``serve_client``) over a ``server.connection.Connection``.

Sessions outlive their connection for ``resume_grace_s``: the client may come back with
``session.start {resume: {session_id, resume_token}}`` and continues from the current chunk. A session
waiting so is paused (it generates nothing, its media clock stops) and does not hold one of the
live slots (as many as its generators measurably keep real-time, at most ``max_sessions``:
``server.admission``); at most ``max_waiting_sessions`` wait, and when one more leaves, the session
that has waited longest is ended. A session not held here can come back too (``SessionFactory.revive``):
a story session from the story store, or, with generator slots on a Ray cluster, a session another front
end opened, whose generator this server then takes over.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import http
import importlib.util
import logging
import secrets
import time
from collections.abc import AsyncIterable, Awaitable, Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from events.errors import BadInput
from server import heap
from server import protocol as p
from server.access import Access, HostGate
from server.adapter import ProtocolAdapter
from server.admission import Admission
from server.auth import check_token
from server.client_voice import CharacterVoice
from server.connection import Connection
from server.core.conductor import Conductor
from server.cpu_watch import CpuWatch
from server.limits import Limits, TokenBucket
from server.loop_watch import LoopLag
from server.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from server.metrics import ServerMetrics
from server.otel import TurnTelemetry
from server.outbox import Outbox
from server.responses import client_token, page_file, response, target
from server.sessions import SessionFactory
from server.vendor import vendor_file
from server.webrtc.settings import RtcSettings
from streaming_model.pool import NoFreeSlot, TakenOver

if TYPE_CHECKING:
    from server.webrtc.endpoint import RtcEndpoint

log = logging.getLogger(__name__)


@dataclass
class LiveSession:
    conductor: Conductor
    resume_token: str
    adapter: ProtocolAdapter = field(init=False)
    """The session's protocol: client messages into the conductor, its outputs into frames."""
    outbox: Connection | None = None
    """The connection it streams to (a WebSocket's outbox, a WebRTC peer); None while it waits for its
    client to resume."""
    expires: asyncio.TimerHandle | None = None
    left_at: float = 0.0  # when its client went away (the longest waiting is ended first)
    dropped_before: int = 0  # media its earlier connections dropped
    closed: bool = False
    token: str | None = None
    """The client token this session was opened with (None without a token secret)."""

    def __post_init__(self) -> None:
        self.adapter = ProtocolAdapter(self.conductor)


@dataclass
class Stats:
    started: float = field(default_factory=time.time)
    sessions_total: int = 0
    refused_total: int = 0
    errors_total: int = 0
    media_dropped_total: int = 0
    evicted_total: int = 0  # waiting sessions ended early to make room for a newer one
    lost_no_slot_total: int = 0  # sessions whose generator's worker died with no other slot free


class OnstageServer:
    """Owns the sessions of one server process."""

    def __init__(
        self,
        factory: SessionFactory,
        limits: Limits | None = None,
        token_secret: str | None = None,
        access: Access | None = None,
        telemetry: TurnTelemetry | None = None,
        rtc: RtcSettings | None = None,
    ):
        """``telemetry`` makes OpenTelemetry spans of the sessions' turns (``server.otel``); None: none."""
        self.factory = factory
        self.limits = limits or Limits()
        self.token_secret = token_secret
        self.access = access or Access()
        self.sessions: dict[str, LiveSession] = {}
        self.stats = Stats()
        self.metrics = ServerMetrics(self)
        self._loop_lag = LoopLag(self.metrics.loop_lag)
        self.cpu = CpuWatch(sessions=self.live_count)
        """Where the CPU went lately: late chunks' warnings say it, admission weighs the machine's."""
        self.admission = Admission(self.limits, factory.workers, self.cpu)
        """Who gets a live slot: the limits and what the generators and the machine measurably keep
        real-time."""
        self.telemetry = telemetry
        self._server: Server | None = None
        self._gate: HostGate | None = None
        self._opening: collections.Counter[str] = collections.Counter()  # per token: sessions being set up
        self._admitting = 0  # new sessions being built: they hold a live slot already
        self._closing: set[asyncio.Task[None]] = set()
        self.rtc_settings = rtc or RtcSettings()
        self.rtc: RtcEndpoint | None = None
        """WebRTC signalling (``server.webrtc``), when enabled and aiortc is installed."""

    async def start(self, host: str = "127.0.0.1", port: int = 8765) -> Server:
        """Listen on ``host:port`` (port 0 picks a free one)."""
        heap.prepare_for_serving()  # the models are loaded: what exists now lives as long as the server
        server = await serve(
            self._handle,
            host,
            port,
            process_request=self._process_request,
            max_size=p.HARD_MAX_MESSAGE_BYTES,
            compression=None,  # JPEG and PCM do not compress; deflate would only cost CPU
            ping_interval=20,
        )
        self._gate = HostGate(self.access, host, server.sockets[0].getsockname()[1])
        self._server = server
        self._loop_lag.start()
        self.cpu.start()
        if self.rtc_settings.enabled and importlib.util.find_spec("aiortc") is not None:
            from server.webrtc.endpoint import RtcEndpoint

            self.rtc = RtcEndpoint(self.serve_client, self.rtc_settings, self.limits, self.factory.voice.rate)
        return server

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        await self._loop_lag.stop()
        await self.cpu.stop()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        if self.rtc is not None:
            await self.rtc.close()
        for session in list(self.sessions.values()):
            await self._end(session)
        if self._closing:
            await asyncio.wait(self._closing)

    def live_count(self) -> int:
        """Sessions with a client connected, and new ones being built: what ``max_sessions`` bounds."""
        return self._admitting + sum(1 for s in self.sessions.values() if s.outbox is not None)

    def waiting(self) -> list[LiveSession]:
        """Sessions waiting for their client to resume, the longest waiting first."""
        return sorted((s for s in self.sessions.values() if s.outbox is None), key=lambda s: s.left_at)

    # ------------------------------------------------------------------------------ HTTP

    def _process_request(
        self, conn: ServerConnection, request: Request
    ) -> Response | Awaitable[Response] | None:
        assert self._gate is not None
        refusal = self._gate.refusal(request.headers)
        if refusal is not None:
            return response(http.HTTPStatus.FORBIDDEN, f"forbidden: {refusal}\n".encode())
        path, query = target(request)
        if path in ("/v1/session", "/v1/rtc", "/metrics") and not self._token_ok(request):
            return response(http.HTTPStatus.UNAUTHORIZED, b"unauthorized: missing or bad token\n")
        if path == "/v1/session":
            return None
        if path == "/v1/rtc":
            return self._rtc_answer(query, request)
        if path == "/healthz":
            body = msgspec.json.encode({"status": "ok", "sessions": len(self.sessions)})
            return response(http.HTTPStatus.OK, body, "application/json")
        if path == "/metrics":
            return response(http.HTTPStatus.OK, self.metrics.exposition(), METRICS_CONTENT_TYPE)
        if (vendored := vendor_file(path)) is not None:
            return response(http.HTTPStatus.OK, *vendored)
        page = page_file("index.html" if path == "/" else path.removeprefix("/static/"))
        return page if page is not None else response(http.HTTPStatus.NOT_FOUND, b"not found\n")

    async def _rtc_answer(self, query: str, request: Request) -> Response:
        """``GET /v1/rtc?offer=``: a WebRTC peer for this client (``server.webrtc.endpoint``)."""
        if self.rtc is None:
            return response(
                http.HTTPStatus.NOT_IMPLEMENTED,
                b"this server does not offer WebRTC; use the WebSocket at /v1/session\n",
            )
        token = client_token(request) if self.token_secret is not None else None
        status, body, content_type = await self.rtc.answer(query, token)
        return response(status, body, content_type)

    def _token_ok(self, request: Request) -> bool:
        return self.token_secret is None or check_token(self.token_secret, client_token(request))

    def dropped_of(self, live: LiveSession) -> int:
        """Media frames dropped for ``live``'s client (all its connections, and while it had none)."""
        now = live.outbox.dropped if live.outbox is not None else 0
        return live.conductor.frames_dropped + live.dropped_before + now

    def dropped_total(self) -> int:
        """Media frames dropped for every session's client, ended sessions included."""
        return self.stats.media_dropped_total + sum(self.dropped_of(s) for s in self.sessions.values())

    # ------------------------------------------------------------------------------ WebSocket

    async def _handle(self, ws: ServerConnection) -> None:
        outbox = Outbox(
            ws,
            media_frames=self.limits.media_queue_frames,
            max_age_s=self.limits.media_max_age_s,
            backlog_s=self.limits.media_backlog_s,
        )
        outbox.start()
        token = client_token(ws.request) if self.token_secret is not None and ws.request else None
        try:
            await self.serve_client(outbox, ws, token)
        except ConnectionClosed:
            pass
        except Exception:
            log.exception("connection handler failed")
            with contextlib.suppress(Exception):
                error = p.Error(code=p.ErrorCode.INTERNAL, message="internal error", fatal=True)
                await ws.send(p.encode_server(error))
        finally:
            await outbox.close()
            # Let what is queued go out (an error before a close) without waiting on a dead peer.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(ws.close(), 1.0)

    async def serve_client(
        self, conn: Connection, incoming: AsyncIterable[str | bytes], token: str | None
    ) -> None:
        """One client, whatever its transport: protocol frames from ``incoming`` (text is a JSON message,
        bytes an audio-in frame) until it ends or a fatal error; answers and the session's outputs go to
        ``conn``. Its session, if it started one, then waits for a resume."""
        messages = TokenBucket(self.limits.messages_per_s, self.limits.message_burst)
        audio = TokenBucket(self.limits.audio_realtime_factor, self.limits.audio_burst_s)
        session: LiveSession | None = None
        try:
            async for data in incoming:
                try:
                    if isinstance(data, str):
                        if not messages.take():
                            raise p.ProtocolError(p.ErrorCode.RATE_LIMITED, "too many messages; slow down")
                        msg = p.decode_client_text(data)
                        if session is None:
                            session = await self._start_with(token, msg, conn)
                            continue
                        for answer in await session.adapter.handle(msg):
                            await conn.put(p.encode_server(answer), droppable=False)
                    else:
                        if session is None:
                            raise p.ProtocolError(p.ErrorCode.NOT_STARTED, "send session.start first")
                        if data[:1] == bytes([p.Kind.VOICE_IN]):
                            session.adapter.voice_in(data)
                            continue
                        pcm = p.decode_audio_in(data)
                        if not audio.take(len(pcm) / 2 / p.AUDIO_IN_RATE):
                            raise p.ProtocolError(
                                p.ErrorCode.RATE_LIMITED, "audio faster than real time; dropped"
                            )
                        await session.conductor.audio(pcm)
                except p.ProtocolError as exc:
                    self.stats.errors_total += 1
                    await conn.put(p.encode_server(p.error_message(exc)), droppable=False)
                    if exc.fatal:
                        break
                except BadInput as exc:
                    self.stats.errors_total += 1
                    error = p.Error(code=p.ErrorCode.BAD_FIELD, message=str(exc), fatal=False)
                    await conn.put(p.encode_server(error), droppable=False)
        finally:
            if session is not None and session.outbox is conn and not session.closed:
                self._detach(session)

    async def _start_with(self, token: str | None, msg: p.ClientMessage, outbox: Connection) -> LiveSession:
        """``_start`` for a client with ``token``: a new session only while the token holds fewer than
        ``sessions_per_token`` (sessions still being set up count, so two at once cannot both slip in)."""
        bound = token if isinstance(msg, p.SessionStart) and msg.resume is None else None
        if bound is not None:
            held = self._opening[bound] + sum(s.token == bound for s in self.sessions.values())
            if held >= self.access.sessions_per_token:
                self.stats.refused_total += 1
                raise p.ProtocolError(
                    p.ErrorCode.RATE_LIMITED,
                    f"this token already holds {held} live session(s), the most one token may;"
                    " resume one with its resume_token, end one, or use another token",
                    msg.ref,
                    fatal=True,
                )
            self._opening[bound] += 1
        try:
            live = await self._start(msg, outbox)
            live.token = live.token or token
            return live
        finally:
            if bound is not None:
                self._opening[bound] -= 1
                if not self._opening[bound]:
                    del self._opening[bound]

    async def _start(self, msg: p.ClientMessage, outbox: Connection) -> LiveSession:
        if not isinstance(msg, p.SessionStart):
            raise p.ProtocolError(p.ErrorCode.NOT_STARTED, "the first message must be session.start", msg.ref)
        if msg.resume is not None:
            return await self._resume(msg, outbox)
        self._admit(msg.ref)
        session_id, token = secrets.token_hex(8), secrets.token_urlsafe(24)
        self._admitting += 1  # the slot is taken while the session is built (a storm must not overfill)
        try:
            conductor, started = await self.factory.create(session_id, msg, token)
        except ValueError as exc:
            raise p.ProtocolError(p.ErrorCode.BAD_FIELD, str(exc), msg.ref) from None
        except NoFreeSlot as exc:
            raise self._no_slot(exc, msg.ref) from None
        finally:
            self._admitting -= 1
        return await self._go_live(LiveSession(conductor, resume_token=token), started, msg, outbox)

    def _admit(self, ref: str | None) -> None:
        """Refuse, with a fatal ``rate_limited`` saying why, a session the server cannot keep real-time
        (``server.admission``)."""
        if (reason := self.admission.refusal(self.live_count())) is not None:
            self.stats.refused_total += 1
            raise p.ProtocolError(p.ErrorCode.RATE_LIMITED, reason, ref, fatal=True)

    def _no_slot(self, exc: NoFreeSlot, ref: str | None) -> p.ProtocolError:
        """A fatal ``rate_limited``: the generators (a cluster's slots) are all taken, though this server
        has room."""
        self.stats.refused_total += 1
        return p.ProtocolError(p.ErrorCode.RATE_LIMITED, str(exc), ref, fatal=True)

    async def _go_live(
        self, live: LiveSession, started: p.SessionStarted, msg: p.SessionStart, outbox: Connection
    ) -> LiveSession:
        self.sessions[live.conductor.session_id] = live
        live.outbox = outbox  # before any await: from here it holds its live slot
        self.stats.sessions_total += 1
        splices = live.conductor.splice(msg.splice)
        started = msgspec.structs.replace(
            started, resume_token=live.resume_token, ref=msg.ref, splices=splices
        )
        await outbox.put(p.encode_server(started), droppable=False)
        live.conductor.on_fatal = lambda task, exc: self._task_failed(live, task, exc)
        live.conductor.media.observer = self.metrics
        if isinstance(player := live.conductor.player, CharacterVoice):
            player.notify = lambda message: self._tell(live, message)
        if self.telemetry is not None:
            self.telemetry.watch(live.conductor.session_id, live.conductor.bus.tracer)
        await live.conductor.start(outbox.sink(live.adapter))
        return live

    def _tell(self, live: LiveSession, message: p.ServerMessage) -> None:
        """Queue a control message for a session's client from synchronous code (none while it is away)."""
        if live.outbox is not None:
            self._background(live.outbox.put(p.encode_server(message), droppable=False))

    async def _task_failed(self, live: LiveSession, task: str, exc: BaseException) -> None:
        """A task the session needs failed, so it ends here. Its generator was taken over by another front
        end (a client resumed the session there): the connection closes as for a resume elsewhere. Its
        generator's worker died and no other slot was free: a fatal ``rate_limited``, counted. Anything
        else: a fatal ``internal``."""
        if isinstance(exc, TakenOver):
            await self._fail(live, None, 1000, "resumed elsewhere")
            return
        if isinstance(exc, NoFreeSlot):
            self.stats.lost_no_slot_total += 1
            error = p.Error(code=p.ErrorCode.RATE_LIMITED, message=str(exc), fatal=True)
        else:
            error = p.Error(code=p.ErrorCode.INTERNAL, message=f"the session failed ({task})", fatal=True)
        await self._fail(live, error, 1011, "session failed")

    async def _fail(self, live: LiveSession, error: p.Error | None, code: int, reason: str) -> None:
        """End a session from inside: the client gets ``error`` (if any), then the connection closes."""
        outbox = live.outbox
        await self._end(live)
        if outbox is not None:
            if error is not None:
                await outbox.put(p.encode_server(error), droppable=False)
            await outbox.close()
            await outbox.hang_up(code, reason)

    async def _resume(self, msg: p.SessionStart, outbox: Connection) -> LiveSession:
        assert msg.resume is not None
        live = self.sessions.get(msg.resume.session_id)
        if live is None:
            # Not live here: a story session of an earlier server can come back from the story store.
            self._admit(msg.ref)
            self._admitting += 1
            try:
                revived = await self.factory.revive(msg.resume.session_id, msg.resume.resume_token)
            except ValueError as exc:
                raise p.ProtocolError(p.ErrorCode.RESUME_FAILED, str(exc), msg.ref) from None
            except NoFreeSlot as exc:
                raise self._no_slot(exc, msg.ref) from None
            finally:
                self._admitting -= 1
            if revived is not None:
                started = self.factory.started_message(revived.session_id)
                return await self._go_live(
                    LiveSession(revived, msg.resume.resume_token), started, msg, outbox
                )
        if (
            live is None
            or live.closed
            # Bytes: compare_digest refuses str with characters outside ASCII.
            or not secrets.compare_digest(live.resume_token.encode(), msg.resume.resume_token.encode())
        ):
            raise p.ProtocolError(
                p.ErrorCode.RESUME_FAILED, "no such session to resume, or a bad token", msg.ref
            )
        if live.outbox is None:
            self._admit(msg.ref)  # a waiting session needs a live slot again; it goes on waiting if none
        if live.expires is not None:
            live.expires.cancel()
            live.expires = None
        previous, live.outbox = live.outbox, outbox
        if previous is not None and previous is not outbox:
            live.dropped_before += previous.dropped
            await previous.hang_up(1000, "resumed elsewhere")
        started = msgspec.structs.replace(
            self.factory.started_message(live.conductor.session_id),
            resume_token=live.resume_token,
            ref=msg.ref,
            splices=live.conductor.splice(msg.splice),  # this connection's client, as it asks
        )
        await outbox.put(p.encode_server(started), droppable=False)
        live.adapter.reconnected()
        live.conductor.attach(outbox.sink(live.adapter))
        if previous is not None and previous is not outbox:
            live.conductor.away.missed(previous.unsent())  # told on the new connection
        return live

    def _detach(self, live: LiveSession) -> None:
        """The client went away: the session pauses and waits ``resume_grace_s`` for it to come back. Its
        live slot is free at once; past ``max_waiting_sessions`` waiting, the longest waiting is ended."""
        live.conductor.attach(None)
        if live.outbox is not None:
            live.dropped_before += live.outbox.dropped
            live.conductor.away.missed(live.outbox.unsent())
        live.outbox = None
        loop = asyncio.get_running_loop()
        live.left_at = loop.time()
        live.expires = loop.call_later(self.limits.resume_grace_s, self._end_soon, live)
        waiting = self.waiting()
        for old in waiting[: max(0, len(waiting) - self.limits.max_waiting_sessions)]:
            self.stats.evicted_total += 1
            self._end_soon(old)

    def _end_soon(self, live: LiveSession) -> None:
        """End a session from synchronous code: it is off the books now, its parts are freed in a task."""
        if self._retire(live):
            self._background(self._free(live))

    def _background(self, job: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(job)
        self._closing.add(task)  # held until done (the loop keeps only weak references to tasks)
        task.add_done_callback(self._closing.discard)

    async def _end(self, live: LiveSession) -> None:
        if self._retire(live):
            await self._free(live)

    async def _free(self, live: LiveSession) -> None:
        """Stop a retired session's work and give what it held back to the system (``server.heap``)."""
        await live.conductor.close()
        if self.telemetry is not None:
            self.telemetry.end(live.conductor.session_id)
        # In a task of its own: by the time it runs, this frame, which refers to the session, is gone.
        self._background(heap.release_ended())

    def _retire(self, live: LiveSession) -> bool:
        """Take a session off the server's books (nothing can resume it after this); False if it was."""
        if live.closed:
            return False
        live.closed = True
        live.conductor.on_fatal = None  # it refers back to the session
        if live.expires is not None:
            live.expires.cancel()
        self.sessions.pop(live.conductor.session_id, None)
        self.stats.media_dropped_total += self.dropped_of(live)
        return True
