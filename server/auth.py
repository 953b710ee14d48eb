"""Session tokens: HMAC-signed, expiring, checked before the WebSocket handshake completes.

A token is ``<expiry unix seconds>.<hex HMAC-SHA256 of "onstage:<expiry>" under the server's secret>``.
``onstage token --secret S`` makes one. Without a secret the server accepts everyone and binds loopback.
"""

from __future__ import annotations

import hashlib
import hmac
import time


def make_token(secret: str, ttl_s: float = 3600.0, now: float | None = None) -> str:
    """A token valid for ``ttl_s`` seconds from ``now``."""
    expiry = int((time.time() if now is None else now) + ttl_s)
    return f"{expiry}.{_sign(secret, expiry)}"


def check_token(secret: str, token: str | None, now: float | None = None) -> bool:
    """Whether ``token`` was signed with ``secret`` and has not expired (constant-time comparison)."""
    if not token or token.count(".") != 1:
        return False
    expiry_text, signature = token.split(".")
    if not expiry_text.isdigit():
        return False
    expiry = int(expiry_text)
    if expiry < (time.time() if now is None else now):
        return False
    return hmac.compare_digest(signature, _sign(secret, expiry))


def _sign(secret: str, expiry: int) -> str:
    return hmac.new(secret.encode(), f"onstage:{expiry}".encode(), hashlib.sha256).hexdigest()
