"""The server's plain HTTP answers: a response of a status and a body, the browser page's files by name,
and the client token a request carries."""

from __future__ import annotations

import http
from pathlib import Path
from urllib.parse import parse_qs

from websockets.datastructures import Headers
from websockets.http11 import Request, Response

PAGE_DIR = Path(__file__).parent / "page"
# Served by name from this list: no path is ever built from what a request says.
PAGE_FILES = frozenset(path.name for path in PAGE_DIR.iterdir() if path.is_file())
CONTENT_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript", ".css": "text/css"}


def page_file(name: str) -> Response | None:
    """The browser page's file ``name`` (one of ``PAGE_FILES``), or None if there is no such file."""
    if name not in PAGE_FILES:
        return None
    path = PAGE_DIR / name
    return response(http.HTTPStatus.OK, path.read_bytes(), CONTENT_TYPES.get(path.suffix, "text/plain"))


def target(request: Request) -> tuple[str, str]:
    """The path and the query of a request's target (``/path?query``, the only form a server is sent).

    Split at the first ``?``, not parsed as a URL: a URL parser reads a path that starts ``//`` as a host
    and raises on ``//[`` (a 500 where a 404 belongs)."""
    path, _, query = request.path.partition("?")
    return path, query


def client_token(request: Request) -> str | None:
    """The token of ``Authorization: Bearer`` (one such header) or else of ``?token=`` (for browsers)."""
    bearer = [
        v[7:].strip(" \t")
        for v in request.headers.get_all("Authorization")
        if v.lower().startswith("bearer ")
    ]
    if len(bearer) == 1:
        return bearer[0]
    return parse_qs(target(request)[1]).get("token", [None])[0]


def response(
    status: http.HTTPStatus, body: bytes, content_type: str = "text/plain; charset=utf-8"
) -> Response:
    """``status`` with ``body``, never cached."""
    headers = Headers(
        [("Content-Type", content_type), ("Content-Length", str(len(body))), ("Cache-Control", "no-store")]
    )
    return Response(status.value, status.phrase, headers, body)
