"""Configuration of the WebRTC transport (readable without aiortc installed)."""

from __future__ import annotations

import msgspec


class RtcSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How the server's WebRTC peers gather candidates and how many may wait for their client."""

    enabled: bool = True
    """Answer offers at ``/v1/rtc`` (when aiortc is installed); else clients use the WebSocket."""
    ice_addresses: tuple[str, ...] = ()
    """The host addresses offered as ICE candidates. Empty: every interface's but loopback's (aioice's
    choice). ``["127.0.0.1"]`` serves browsers on this machine only (and tests in a loopback namespace)."""
    stun_servers: tuple[str, ...] = ()
    """STUN servers (``stun:host:port``) for a server-reflexive candidate; none by default: a server
    reachable at its host address needs none, and nothing is contacted that the operator did not name."""
    max_pending_peers: int = 8
    """Peer connections whose client has not started (or resumed) a session yet; more are refused (503)."""
    start_timeout_s: float = 20.0
    """A peer connection whose client has not started a session this long after the answer is closed."""
