"""Media out: the session's clock, JPEG frames and PCM16 audio slices.

Chunk k holds frames 4k..4k+3 and covers presentation time [k*T, (k+1)*T) with T = 166.67 ms at 24 fps.
Every video frame carries its own slice of the character's audio (1000 samples at 24 kHz).
"""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

FPS = 24
CHUNK_FRAMES = 4
FRAME_S = 1.0 / FPS
CHUNK_S = CHUNK_FRAMES / FPS


def frame_pts_ms(frame: int) -> float:
    """Presentation time of global frame number ``frame`` in ms from the session's start."""
    return round(frame * 1000.0 / FPS, 3)


def encode_jpeg(frame: np.ndarray, quality: int = 85) -> bytes:
    """One (H, W, 3) uint8 frame as JPEG bytes (deterministic for the same pixels and quality)."""
    buf = io.BytesIO()
    Image.fromarray(frame, mode="RGB").save(buf, format="JPEG", quality=quality, optimize=False)
    return buf.getvalue()


def pcm16(samples: np.ndarray) -> bytes:
    """Float samples in [-1, 1] as PCM 16-bit little-endian bytes."""
    return (np.clip(samples, -1.0, 1.0 - 1.0 / 32768) * 32768.0).astype("<i2").tobytes()
