"""The error every listener raises for input it cannot take."""

from __future__ import annotations


class BadInput(ValueError):
    """Input that a listener refuses, with the problem named. The listener's state is left unchanged.

    ``field`` names what was wrong (``"sample_rate"``, ``"samples"``, ``"gesture"``...), so a server can
    answer with a precise protocol error without parsing the message.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
