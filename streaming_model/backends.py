"""The backends in the repository, by name: ``open_backend("world", {"fps": "16"})``.

Options arrive as text (``--backend-option fps=16``, ``--backend-option linears=int8``); each backend
names the ones it takes, and a wrong name, option or value is a ``ValueError`` saying which and what would
do. The tiny model takes ``steps`` (denoise steps per chunk), ``linears`` (``auto``, the default:
int8 where the machine computes in fp32; ``float`` or ``int8``: ``streaming_model.linears``),
``max_batch`` (the largest batch measured at warm-up; 1: no batching) and
``commit_pass`` (``fused``, the default where it is exact on the machine, or ``apart``:
``streaming_model.passes``), ``dit`` and ``codec`` (``slim``, the default, or ``full``: the cheaper decoder
or the one that taught it; or weights files other than the shipped ones: a trained candidate, served before
it is promoted) and ``upsample`` (``parity``, the default, or ``transposed``: how the decoder's output layer
computes, ``streaming_model.upsample``) and ``kernels`` (``auto``, the default: ``onednn`` where the machine
computes in bf16; ``torch`` or ``onednn``: what the transformer's attention and MLP run on,
``streaming_model.kernels``); the world takes its clock and picture size.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .backend import Backend
from .kernels import KernelsChoice, check_kernels
from .linears import LinearsChoice, check_linears
from .loading import weights_file
from .passes import CommitPass, check_commit_pass
from .upsample import Upsample, check_upsample

BACKENDS: tuple[str, ...] = ("tiny", "world")
"""Backend names, the default first."""


def open_backend(name: str = "tiny", options: Mapping[str, str] | None = None) -> Backend:
    """Load and warm up the backend ``name`` with ``options`` (call it off the event loop)."""
    opened: dict[str, Callable[[dict[str, Any]], Backend]] = {"tiny": _tiny, "world": _world}
    if name not in opened:
        raise ValueError(f"unknown backend {name!r}; known: {', '.join(BACKENDS)}")
    return opened[name](_values(name, options or {}))


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


def _integer(key: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"backend option {key} must be an integer, got {text[:40]!r}") from None


def _linears(_key: str, text: str) -> LinearsChoice:
    return check_linears(text)


def _commit_pass(_key: str, text: str) -> CommitPass:
    return check_commit_pass(text)


def _upsample(_key: str, text: str) -> Upsample:
    return check_upsample(text)


def _kernels(_key: str, text: str) -> KernelsChoice:
    return check_kernels(text)


def _weights(key: str, text: str) -> Path:
    try:
        return weights_file(key, text)
    except ValueError as err:
        raise ValueError(f"backend option {key} takes {err}") from None


_TAKES: dict[str, dict[str, Callable[[str, str], object]]] = {
    "tiny": {
        "steps": _integer,
        "linears": _linears,
        "max_batch": _integer,
        "commit_pass": _commit_pass,
        "dit": _weights,
        "codec": _weights,
        "upsample": _upsample,
        "kernels": _kernels,
    },
    "world": {key: _integer for key in ("fps", "chunk_frames", "width", "height")},
}


def _values(name: str, options: Mapping[str, str]) -> dict[str, Any]:
    takes = _TAKES[name]
    values: dict[str, Any] = {}
    for key, text in options.items():
        if key not in takes:
            raise ValueError(f"backend {name} has no option {key!r}; it takes: {', '.join(takes)}")
        values[key] = takes[key](key, text)
    return values


def _tiny(options: dict[str, Any]) -> Backend:
    from .tiny import TinyBackend

    return TinyBackend.load(**options)


def _world(options: dict[str, Any]) -> Backend:
    from .world_backend import WorldBackend, WorldOptions

    return WorldBackend(WorldOptions(**options))
