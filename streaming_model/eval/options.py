"""What a configuration under evaluation is: runtime options given as ``KEY=VALUE`` text.

``parse_options(["steps=1", "linears=int8"])`` gives ``RunOptions(steps=1, linears="int8")``; a key that is
not an option, or a value it cannot take, is a ``ValueError`` naming the key and what it takes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, get_args

import msgspec

from ..evaluate import SIDE_TURNS, Order
from ..kernels import KERNELS, KernelsChoice, check_kernels
from ..kv_cache import CacheMode
from ..linears import LINEARS, LinearsChoice, check_linears
from ..loading import DEFAULT_WEIGHTS, weights_choices, weights_file
from ..manifest import ACTION_NAMES
from ..passes import COMMIT_PASSES, CommitPass, check_commit_pass
from ..precision import PRECISIONS
from ..sampler import STEPS
from ..upsample import UPSAMPLES, Upsample, check_upsample

AUTO = "auto"  # the machine's own choice (``precision.compute_dtype``)


class RunOptions(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The runtime options of one configuration (the defaults are what a live session runs)."""

    steps: int = STEPS  # denoise steps per chunk
    cache: CacheMode = "write_time"  # the KV cache path: write-time maintenance, or the naive reference
    precision: str = AUTO  # "bf16", "fp32", or the machine's choice
    linears: LinearsChoice = "auto"  # the blocks' matrix products: the machine's choice, as trained, or int8
    cache_noise: float = 0.0  # > 0 damages the cache on purpose (``Generator.open_session``)
    commit_pass: CommitPass = "fused"  # a chunk into the cache in the next chunk's pass, or in one apart
    dit: str = DEFAULT_WEIGHTS["dit"]  # the transformer's weights: the shipped ones, or a file (a candidate)
    codec: str = DEFAULT_WEIGHTS["codec"]  # the codec's: "slim" (served), "full" (its teacher), or a file
    upsample: Upsample = "parity"  # the decoder's output layer: as served, or as trained (``transposed``)
    kernels: KernelsChoice = "auto"  # the transformer's attention and MLP: the machine's choice, or named

    def describe(self, names: Sequence[str] | None = None) -> str:
        """``steps=2 cache=write_time precision=auto linears=auto cache_noise=0 commit_pass=fused``: every
        option, or those named."""
        return " ".join(f"{name}={_text(getattr(self, name))}" for name in names or self.__struct_fields__)


class Script(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How much of the scripted evaluation each seed runs (all of it unless shortened for a quick check)."""

    actions: tuple[str, ...] = ACTION_NAMES
    side_turns: int = SIDE_TURNS
    # Each seed holds the actions in its own order, so that an action is judged after many others (the
    # manifest's order judged a wave only after a jump and a sit, and missed one lost after a walk and a sit).
    order: Order = "shuffled"
    drift_chunks: int = 60  # the long session's length; 0 leaves the drift probe out


def _steps(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError
    return value


def _cache(text: str) -> str:
    if text not in get_args(CacheMode):
        raise ValueError
    return text


def _precision(text: str) -> str:
    if text != AUTO and text not in PRECISIONS:
        raise ValueError
    return text


def _linears(text: str) -> LinearsChoice:
    return check_linears(text)


def _noise(text: str) -> float:
    value = float(text)
    if not 0.0 <= value < float("inf"):
        raise ValueError
    return value


def _weights(kind: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        weights_file(kind, text)  # a name it ships, or a file that exists
        return text

    return parse


_PARSERS: dict[str, tuple[Callable[[str], Any], str]] = {
    "steps": (_steps, "an integer >= 1"),
    "cache": (_cache, " or ".join(get_args(CacheMode))),
    "precision": (_precision, ", ".join((AUTO, *PRECISIONS))),
    "linears": (_linears, " or ".join(LINEARS)),
    "cache_noise": (_noise, "a number >= 0 (0 leaves the cache sound)"),
    "commit_pass": (check_commit_pass, " or ".join(COMMIT_PASSES)),
    "dit": (_weights("dit"), weights_choices("dit")),
    "codec": (_weights("codec"), weights_choices("codec")),
    "upsample": (check_upsample, " or ".join(UPSAMPLES)),
    "kernels": (check_kernels, " or ".join(KERNELS)),
}


def parse_actions(names: Sequence[str]) -> tuple[str, ...]:
    """The held actions of a shortened script, each once and each one the model has; ``ValueError``
    naming the one that is not."""
    for name in names:
        if name not in ACTION_NAMES:
            raise ValueError(f"unknown action {name[:40]!r}; the actions are: {', '.join(ACTION_NAMES)}")
    if len(set(names)) < len(names):
        raise ValueError("give each action once: the script holds each one once")
    if not names:
        raise ValueError("give at least one action")
    return tuple(names)


def parse_options(items: Sequence[str]) -> RunOptions:
    """``RunOptions`` from ``KEY=VALUE`` items; ``ValueError`` saying which item is wrong and why."""
    values: dict[str, Any] = {}
    for item in items:
        key, eq, text = item.partition("=")
        key, text = key.strip(), text.strip()
        if not eq or not key:
            raise ValueError(f"option {item[:40]!r}: write it as KEY=VALUE")
        if key not in _PARSERS:
            raise ValueError(f"unknown option {key[:40]!r}; the options are: {', '.join(_PARSERS)}")
        if key in values:
            raise ValueError(f"option {key!r} is given twice")
        parse, takes = _PARSERS[key]
        try:
            values[key] = parse(text)
        except ValueError:
            raise ValueError(f"option {key} takes {takes}, not {text[:40]!r}") from None
    return RunOptions(**values)


def _text(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)
