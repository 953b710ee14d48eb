"""A chunk's ``finish`` that holds the generator's thread a while before encoding, sent to a Ray slot actor
by reference (this module is importable there): the chunk calls sent meanwhile are queued behind it, so a
test can make them wait together instead of hoping they do."""

from __future__ import annotations

import time

import numpy as np

from server.media import encode_frames

HOLD_S = 1.0
"""Far longer than an actor call takes to arrive, even on a loaded machine."""


def held_jpegs(frames: np.ndarray) -> list[bytes]:
    """``encode_frames`` after holding the calling thread for ``HOLD_S``."""
    time.sleep(HOLD_S)
    return encode_frames(frames)
