"""Input audio as the listeners take it: validation into float32 mono samples, and the audio clock.

The listeners work on 16 kHz mono audio. Clients send PCM 16-bit little-endian; tools and tests may pass
float arrays. Both arrive here first, so every listener sees the same clean samples or the same error.
"""

from __future__ import annotations

import numpy as np

from events.errors import BadInput

SAMPLE_RATE = 16_000
MAX_FRAME_SAMPLES = SAMPLE_RATE  # one second: PROTOCOL.md's largest audio frame


def decode_pcm16(data: bytes | bytearray | memoryview) -> np.ndarray:
    """PCM 16-bit little-endian bytes -> float32 samples in [-1, 1)."""
    n = len(data)
    if n == 0:
        raise BadInput("samples", "empty audio frame")
    if n % 2:
        raise BadInput("samples", f"PCM16 needs an even number of bytes, got {n}")
    return np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768.0


def validate_samples(
    samples: np.ndarray | bytes | bytearray | memoryview,
    sample_rate: int = SAMPLE_RATE,
    max_samples: int | None = MAX_FRAME_SAMPLES,
) -> np.ndarray:
    """Check one frame of input audio and return it as contiguous float32 mono samples.

    Raises ``BadInput`` for a sample rate other than 16 kHz, an empty or oversized frame, bytes that are not
    PCM16, a multi-channel array, and NaN or infinite samples.
    """
    if sample_rate != SAMPLE_RATE:
        raise BadInput("sample_rate", f"expected {SAMPLE_RATE} Hz mono, got {sample_rate} Hz")
    if isinstance(samples, bytes | bytearray | memoryview):
        out = decode_pcm16(samples)
    else:
        arr = np.asarray(samples)
        if arr.ndim != 1:
            raise BadInput("samples", f"expected mono samples (1-D), got shape {arr.shape}")
        if arr.size == 0:
            raise BadInput("samples", "empty audio frame")
        if arr.dtype == np.int16:
            out = arr.astype(np.float32) / 32768.0
        elif np.issubdtype(arr.dtype, np.floating):
            out = np.ascontiguousarray(arr, dtype=np.float32)
            if not np.isfinite(out).all():
                bad = int(np.count_nonzero(~np.isfinite(out)))
                raise BadInput("samples", f"{bad} sample(s) are NaN or infinite")
        else:
            raise BadInput("samples", f"expected int16 or float samples, got dtype {arr.dtype}")
    if max_samples is not None and out.size > max_samples:
        raise BadInput("samples", f"frame of {out.size} samples is over the limit of {max_samples}")
    return out


class AudioClock:
    """Counts the samples a stream has received, so positions stay exact over hours (integer arithmetic)."""

    def __init__(self, sample_rate: int = SAMPLE_RATE) -> None:
        self.sample_rate = sample_rate
        self.samples = 0

    def advance(self, n: int) -> None:
        self.samples += n

    def ms(self, sample_index: int | None = None) -> float:
        """Milliseconds at ``sample_index`` (default: the end of what was received)."""
        index = self.samples if sample_index is None else sample_index
        return index * 1000.0 / self.sample_rate
