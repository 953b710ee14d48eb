"""Session tokens: HMAC-signed, expiring, checked before the WebSocket handshake completes.

A token is ``<expiry unix seconds>.<hex HMAC-SHA256 of "onstage:<expiry>" under the server's secret>``,
written one way only: ASCII decimal digits without leading zeros, lowercase hex. ``onstage token --secret
S`` makes one. Without a secret the server accepts everyone and binds loopback.

What a token grants, until it expires: opening sessions (at most ``Access.sessions_per_token`` live at
once) and reading ``/metrics``. Resuming a session takes that session's own resume token as well.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import re
import time

# Fifteen digits of seconds reach thirty million years; anything longer is not a token of ours.
_TOKEN = re.compile(r"(0|[1-9][0-9]{0,14})\.([0-9a-f]{64})")


def make_token(secret: str, ttl_s: float = 3600.0, now: float | None = None) -> str:
    """A token valid for ``ttl_s`` seconds from ``now``; ValueError if its expiry cannot be written."""
    expiry = (time.time() if now is None else now) + ttl_s
    if not math.isfinite(expiry) or not 0 <= expiry < 10**15:
        raise ValueError(f"a ttl of {ttl_s} s gives an expiry that a token cannot carry")
    return f"{int(expiry)}.{_sign(secret, int(expiry))}"


def check_token(secret: str, token: str | None, now: float | None = None) -> bool:
    """Whether ``token`` was signed with ``secret`` and has not expired (constant-time comparison).

    Any string may be given: what is not a well-formed token is False, never an exception."""
    match = _TOKEN.fullmatch(token or "")
    if match is None:
        return False
    expiry = int(match[1])
    if expiry < (time.time() if now is None else now):
        return False
    return hmac.compare_digest(match[2], _sign(secret, expiry))


def _sign(secret: str, expiry: int) -> str:
    return hmac.new(
        secret.encode(errors="surrogateescape"), f"onstage:{expiry}".encode(), hashlib.sha256
    ).hexdigest()
