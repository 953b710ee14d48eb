"""Real test audio, made by the tests themselves (see ``server.demo_audio``), plus what only tests need."""

from __future__ import annotations

import numpy as np

from events.listener import Listener
from events.vocabulary import Event
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


to_pcm16 = pcm16
"""Float samples -> PCM 16-bit little-endian bytes, as a client sends them."""


def feed(listener: Listener, audio: np.ndarray, sizes: list[int] | None = None) -> list[Event]:
    """Feed ``audio`` to ``listener`` in frames cycling through ``sizes`` (one frame if None), then flush."""
    events: list[Event] = []
    i, k = 0, 0
    while i < audio.size:
        n = audio.size if sizes is None else sizes[k % len(sizes)]
        events += listener.feed(audio[i : i + n])
        i, k = i + n, k + 1
    return events + listener.flush()
