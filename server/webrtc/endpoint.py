"""Signalling: ``GET /v1/rtc?offer=OFFER`` answers a client's SDP offer with the server's SDP answer.

The server's port speaks HTTP through ``websockets``, which takes GET requests without a body only, so
the offer travels in the query: ``OFFER`` is the SDP text compressed with raw DEFLATE (the browser's
``CompressionStream("deflate-raw")``, Python's ``zlib`` with ``wbits=-15``) and base64url-encoded
without padding (``encode_offer``). A browser's offer, candidates included, is 4-6 KB of text and about
2 KB compressed, well inside the 8 KiB that an HTTP request line may hold. The answer comes back as JSON
``{"type": "answer", "sdp": ...}``. Authentication is the WebSocket's (``Authorization: Bearer`` or
``?token=``), checked by the server before this runs. ICE is not trickled: the offer holds its candidates
and so does the answer.

The offer must have a video and an audio m-line (the character's picture and voice; the audio one also
carries the microphone when the client sends it) and a data channel (the protocol's messages). Each answered
offer is one peer connection, served by the server's client loop exactly as a WebSocket is (``peer``); one
whose client starts no session within ``RtcSettings.start_timeout_s`` is closed.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import http
import logging
import re
import zlib
from collections.abc import AsyncIterable, Awaitable, Callable
from urllib.parse import parse_qs

import msgspec
from aiortc import RTCConfiguration, RTCIceServer, RTCPeerConnection, RTCSessionDescription

from server.connection import Connection
from server.limits import Limits
from server.webrtc.ice import offer_only
from server.webrtc.peer import RtcConnection
from server.webrtc.settings import RtcSettings

log = logging.getLogger(__name__)

MAX_SDP_BYTES = 64 * 1024
REQUIRED_MEDIA = ("video", "audio", "application")

ServeClient = Callable[[Connection, AsyncIterable[str | bytes], str | None], Awaitable[None]]
"""The server's loop for one client: (connection, what the client says, its token)."""

Answer = tuple[http.HTTPStatus, bytes, str]
"""An HTTP answer: status, body, content type."""


class OfferError(ValueError):
    """The request's offer cannot be used; the message tells the client what was wrong with it."""


def encode_offer(sdp: str) -> str:
    """``sdp`` as the ``offer`` query parameter: raw DEFLATE, then base64url without padding."""
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    raw = deflate.compress(sdp.encode()) + deflate.flush()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def decode_offer(query: str) -> str:
    """The SDP offer in a request's query string (``OfferError`` says what is wrong with it)."""
    values = parse_qs(query).get("offer", [])
    if len(values) != 1:
        raise OfferError("offer: send one ?offer=, the SDP offer raw-deflated and base64url-encoded")
    value = values[0]
    try:
        raw = base64.b64decode(value + "=" * (-len(value) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        raise OfferError("offer: not base64url") from None
    inflate = zlib.decompressobj(-15)
    try:
        sdp = inflate.decompress(raw, MAX_SDP_BYTES + 1)
    except zlib.error:
        raise OfferError("offer: not raw DEFLATE data") from None
    if len(sdp) > MAX_SDP_BYTES or inflate.unconsumed_tail:
        raise OfferError(f"offer: over {MAX_SDP_BYTES // 1024} KiB of SDP")
    if not inflate.eof:
        raise OfferError("offer: not raw DEFLATE data (or cut short)")
    try:
        text = sdp.decode()
    except UnicodeDecodeError:
        raise OfferError("offer: not UTF-8 text") from None
    if not text.startswith("v=0"):
        raise OfferError("offer: not an SDP description (one begins with v=0)")
    media = set(re.findall(r"^m=(\w+) ", text, re.M))
    if missing := [kind for kind in REQUIRED_MEDIA if kind not in media]:
        raise OfferError(
            f"offer: no {' or '.join(missing)} m-line; it needs video and audio (the character's picture "
            "and voice) and a data channel (application: the protocol's messages)"
        )
    return text


class RtcEndpoint:
    """Answers offers and runs each peer connection's client loop until it ends."""

    def __init__(
        self, serve: ServeClient, settings: RtcSettings, limits: Limits, audio_out_rate: int
    ) -> None:
        if settings.ice_addresses:
            offer_only(settings.ice_addresses)
        self._serve = serve
        self.settings = settings
        self.limits = limits
        self.audio_out_rate = audio_out_rate
        self.peers: set[RtcConnection] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    def pending(self) -> int:
        """Peer connections whose client has no session streaming to it yet."""
        return sum(not peer.live.is_set() for peer in self.peers)

    async def answer(self, query: str, token: str | None) -> Answer:
        """The HTTP answer to one offer request (its query string)."""
        if self.pending() >= self.settings.max_pending_peers:
            return _text(
                http.HTTPStatus.SERVICE_UNAVAILABLE, "too many WebRTC connections starting; try again"
            )
        try:
            offer = decode_offer(query)
        except OfferError as exc:
            return _text(http.HTTPStatus.BAD_REQUEST, str(exc))
        ice = [RTCIceServer(url) for url in self.settings.stun_servers]
        peer = RtcConnection(
            RTCPeerConnection(RTCConfiguration(iceServers=ice)),
            self.audio_out_rate,
            max_video_frames=self.limits.media_queue_frames,
            max_audio_s=self.limits.media_max_age_s,
        )
        try:
            await peer.pc.setRemoteDescription(RTCSessionDescription(sdp=offer, type="offer"))
            peer.add_tracks()
            await peer.pc.setLocalDescription(await peer.pc.createAnswer())
        except Exception:  # aiortc says what it disliked in its own terms; the client gets ours
            log.debug("a WebRTC offer could not be negotiated", exc_info=True)
            await peer.pc.close()
            return _text(
                http.HTTPStatus.BAD_REQUEST,
                "offer: could not be negotiated (it needs VP8 or H264 video, Opus audio and an SCTP "
                "data channel, with its ICE candidates)",
            )
        self.peers.add(peer)
        task = asyncio.get_running_loop().create_task(self._run(peer, token), name="rtc-peer")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        local = peer.pc.localDescription
        body = msgspec.json.encode({"type": local.type, "sdp": local.sdp})
        return http.HTTPStatus.OK, body, "application/json"

    async def _run(self, peer: RtcConnection, token: str | None) -> None:
        loop = asyncio.get_running_loop()
        late = loop.call_later(self.settings.start_timeout_s, self._close_unstarted, peer)
        try:
            await self._serve(peer, peer.incoming(), token)
        except Exception:
            log.exception("WebRTC client loop failed")
        finally:
            late.cancel()
            await peer.close()
            await peer.hang_up(1000, "done")
            self.peers.discard(peer)

    def _close_unstarted(self, peer: RtcConnection) -> None:
        if not peer.live.is_set():
            task = asyncio.get_running_loop().create_task(peer.hang_up(1008, "no session started in time"))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        """Close every peer connection and wait for their loops to end."""
        for peer in list(self.peers):
            await peer.hang_up(1001, "server closing")
        if self._tasks:
            with contextlib.suppress(Exception):
                await asyncio.wait(set(self._tasks), timeout=10)


def _text(status: http.HTTPStatus, message: str) -> Answer:
    return status, f"{message}\n".encode(), "text/plain; charset=utf-8"
