"""A clock that moves only when a test moves it, for code that takes a ``clock`` callable."""

from __future__ import annotations


class ManualClock:
    """Returns ``t``; a test advances ``t`` by hand."""

    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t
