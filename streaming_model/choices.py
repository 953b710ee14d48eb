"""Runtime options that take one of a few names (``linears``, ``kernels``, ``upsample``): the check that
says which names would do."""

from __future__ import annotations


def one_of(value: str, choices: tuple[str, ...], option: str) -> str:
    """``value`` if it is one of ``choices``; else ``ValueError`` naming ``option`` and the choices."""
    if value in choices:
        return value
    raise ValueError(f"{option} must be one of {', '.join(choices)}, not {value[:40]!r}")
