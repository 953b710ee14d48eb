"""Who may reach the server from where: the Host and Origin rules, and what one token admits.

Any web page a user visits can make the browser open ``ws://127.0.0.1:8765`` (cross-site WebSocket
hijacking) or load the page under its own name resolved to 127.0.0.1 (DNS rebinding). So every HTTP
request, the WebSocket handshake and the page alike, must name this server in ``Host``, and a request
that carries an ``Origin`` (every browser request across sites does) must come from this server's own
page. Requests without ``Origin`` are not from a cross-site page: clients such as ``onstage client`` pass.
"""

from __future__ import annotations

import msgspec
from websockets.datastructures import Headers

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


class Access(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Names and origins accepted beyond the defaults, and how many live sessions one token may hold.

    Entries are compared with the header as sent (case aside): ``allowed_hosts`` are ``Host`` values such
    as ``"stage.example.org"`` or ``"10.0.0.5:8765"`` (the page served under one of them may use the
    server too); ``allowed_origins`` are origins of other sites' pages, such as ``"https://app.example"``.
    """

    allowed_hosts: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()
    sessions_per_token: int = 1
    """Live sessions (those waiting out their resume grace included) one token may hold at once."""

    def __post_init__(self) -> None:
        if self.sessions_per_token < 1:
            raise ValueError(f"sessions_per_token must be at least 1, got {self.sessions_per_token}")


class HostGate:
    """The Host and Origin check of one listening server (its bound host and port known)."""

    def __init__(self, access: Access, bound_host: str, port: int) -> None:
        names = {*LOOPBACK_NAMES, f"[{bound_host}]" if ":" in bound_host else bound_host}
        # A browser leaves the port out of Host and Origin when it is the scheme's default.
        hosts = {f"{name}:{port}" for name in names} | (names if port == 80 else set())
        self.hosts = frozenset(h.lower() for h in (*hosts, *access.allowed_hosts))
        # The page served under any accepted name is this server's own page (over TLS behind a proxy too).
        own = {f"{scheme}://{h}" for h in self.hosts for scheme in ("http", "https")}
        self.origins = frozenset(own | {o.lower() for o in access.allowed_origins})

    def refusal(self, headers: Headers) -> str | None:
        """Why a request with these headers is refused (a short reason for the client), or None."""
        host = headers.get_all("Host")
        if len(host) != 1 or host[0].lower() not in self.hosts:
            return "this server does not answer to that Host"
        origin = headers.get_all("Origin")
        if len(origin) > 1 or (origin and origin[0].lower() not in self.origins):
            return "pages of another origin may not use this server"
        return None
