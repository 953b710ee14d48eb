"""Real test audio, made by the tests themselves (see ``server.demo_audio``), plus what only tests need."""

from __future__ import annotations

import numpy as np

from server.demo_audio import (
    RATE,
    clap,
    claps,
    knock,
    knocks,
    noise,
    place,
    silence,
    speech,
    trim,
)
from server.media import pcm16

__all__ = [
    "RATE",
    "clap",
    "claps",
    "knock",
    "knocks",
    "noise",
    "place",
    "silence",
    "speech",
    "to_pcm16",
    "trim",
]


def to_pcm16(audio: np.ndarray) -> bytes:
    """Float samples -> PCM 16-bit little-endian bytes, as a client sends them."""
    return pcm16(audio)
