"""The shape every audio listener shares, so the ears can run them side by side on one stream."""

from __future__ import annotations

from typing import Protocol

import numpy as np

from events.vocabulary import Event


class Listener(Protocol):
    """One synchronous stage of continuous listening.

    ``feed`` takes the next validated frame of the stream (float32 mono 16 kHz, any length, see
    ``events.audio.validate_samples``) and returns the events it completes, each with its exact
    ``audio_ms`` counted by the listener from the first sample it was fed. ``flush`` ends the stream and
    returns what is still open (a speech segment that never stopped, say). Listeners keep bounded state
    only, so they can run for hours.
    """

    def feed(self, samples: np.ndarray) -> list[Event]: ...

    def flush(self) -> list[Event]: ...
