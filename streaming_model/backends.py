"""The backends in the repository, by name: ``open_backend("world", {"fps": "16"})``.

Options arrive as text (``--backend-option fps=16``); each backend names the ones it takes, and a wrong
name, option or value is a ``ValueError`` saying which and what would do.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from .backend import Backend

BACKENDS: tuple[str, ...] = ("tiny", "world")
"""Backend names, the default first."""


def open_backend(name: str = "tiny", options: Mapping[str, str] | None = None) -> Backend:
    """Load and warm up the backend ``name`` with ``options`` (call it off the event loop)."""
    opened: dict[str, Callable[[dict[str, int]], Backend]] = {"tiny": _tiny, "world": _world}
    if name not in opened:
        raise ValueError(f"unknown backend {name!r}; known: {', '.join(BACKENDS)}")
    return opened[name](_integers(name, options or {}))


def parse_options(items: list[str]) -> dict[str, str]:
    """``["fps=16", "width=160"]`` -> ``{"fps": "16", "width": "160"}``; ``ValueError`` for an item
    without ``=`` or an option given twice."""
    options: dict[str, str] = {}
    for item in items:
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or not key:
            raise ValueError(f"backend option {item!r}: write it as NAME=VALUE")
        if key in options:
            raise ValueError(f"backend option {key!r} is given twice")
        options[key] = value.strip()
    return options


_TAKES: dict[str, tuple[str, ...]] = {"tiny": ("steps",), "world": ("fps", "chunk_frames", "width", "height")}


def _integers(name: str, options: Mapping[str, str]) -> dict[str, int]:
    takes = _TAKES[name]
    values: dict[str, int] = {}
    for key, text in options.items():
        if key not in takes:
            raise ValueError(f"backend {name} has no option {key!r}; it takes: {', '.join(takes)}")
        try:
            values[key] = int(text)
        except ValueError:
            raise ValueError(f"backend option {key} must be an integer, got {text[:40]!r}") from None
    return values


def _tiny(options: dict[str, int]) -> Backend:
    from .tiny import TinyBackend

    return TinyBackend.load(**options)


def _world(options: dict[str, int]) -> Backend:
    from .world_backend import WorldBackend, WorldOptions

    return WorldBackend(WorldOptions(**options))
