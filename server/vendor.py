"""The files of the page's camera models, served by this server from where ``scripts/setup-page`` put them.

The browser page runs MediaPipe's hand and face models itself (server/page/camera.js). Their scripts,
wasm and model files come from the npm packages ``@mediapipe/hands`` and ``@mediapipe/face_detection``
(Apache-2.0; versions pinned in server/page/vendor/package.json), installed at set-up time into
server/page/vendor/node_modules, never fetched from anywhere at run time. They are served under
``/static/vendor/<package>/<file>``, by name from the list of files the packages hold: no path is ever
built from what a request says.
"""

from __future__ import annotations

from pathlib import Path

VENDOR_DIR = Path(__file__).parent / "page" / "vendor" / "node_modules" / "@mediapipe"
PACKAGES = ("hands", "face_detection")
PREFIX = "/static/vendor/"
CONTENT_TYPES = {
    ".js": "text/javascript",
    ".wasm": "application/wasm",  # what a browser needs to compile it while it streams in
}


def _listing() -> dict[str, Path]:
    files = {}
    for package in PACKAGES:
        folder = VENDOR_DIR / package
        if folder.is_dir():
            files.update({f"{package}/{path.name}": path for path in folder.iterdir() if path.is_file()})
    return files


FILES = _listing()
"""``<package>/<file>`` -> its path, for every file the installed packages hold (none before set-up)."""


def vendor_file(url_path: str) -> tuple[bytes, str] | None:
    """The body and content type of ``/static/vendor/<package>/<file>``, or None when there is none."""
    path = FILES.get(url_path.removeprefix(PREFIX)) if url_path.startswith(PREFIX) else None
    if path is None:
        return None
    return path.read_bytes(), CONTENT_TYPES.get(path.suffix, "application/octet-stream")
