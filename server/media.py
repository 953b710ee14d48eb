"""Media out: the session's clock, JPEG frames and PCM16 audio slices.

The clock is the session's manifest's: with n frames per chunk at f fps, chunk k holds frames nk..nk+n-1
and covers presentation time [k*T, (k+1)*T) with T = n/f (166.67 ms for the tiny model's 4 frames at 24
fps). Every video frame carries its own slice of the character's audio (rate/f samples: 1000 at 24 kHz).
"""

from __future__ import annotations

import io

import msgspec
import numpy as np
from PIL import Image

from streaming_model.manifest import Manifest


class MediaClock(msgspec.Struct, frozen=True):
    """A session's media clock: ``fps`` frames a second, ``chunk_frames`` frames a chunk."""

    fps: int
    chunk_frames: int

    @classmethod
    def of(cls, manifest: Manifest) -> MediaClock:
        """The clock ``manifest`` declares."""
        return cls(manifest.fps, manifest.frames_per_chunk)

    @property
    def frame_s(self) -> float:
        """Seconds one frame is shown."""
        return 1.0 / self.fps

    @property
    def chunk_s(self) -> float:
        """Seconds one chunk covers."""
        return self.chunk_frames / self.fps

    def first_frame(self, chunk: int) -> int:
        """Global number of chunk ``chunk``'s first frame."""
        return chunk * self.chunk_frames

    def pts_ms(self, frame: int) -> float:
        """Presentation time of global frame number ``frame`` in ms from the session's start."""
        return round(frame * 1000.0 / self.fps, 3)

    def samples_per_frame(self, rate: int) -> int:
        """Audio samples at ``rate`` Hz that one frame carries; ``ValueError`` unless a frame holds a whole
        number of them (the slices would drift from the pictures)."""
        if rate % self.fps:
            raise ValueError(f"an audio rate of {rate} Hz does not divide into {self.fps} frames a second")
        return rate // self.fps


def encode_jpeg(frame: np.ndarray, quality: int = 85) -> bytes:
    """One (H, W, 3) uint8 frame as JPEG bytes (deterministic for the same pixels and quality)."""
    buf = io.BytesIO()
    Image.fromarray(frame, mode="RGB").save(buf, format="JPEG", quality=quality, optimize=False)
    return buf.getvalue()


def encode_frames(frames: np.ndarray, quality: int = 85) -> list[bytes]:
    """A chunk's frames, (N, H, W, 3) uint8, as JPEG images: how a chunk is finished where it was made
    (a model worker's thread or a remote worker), so only encoded pictures travel."""
    return [encode_jpeg(frame, quality) for frame in frames]


def pcm16(samples: np.ndarray) -> bytes:
    """Float samples in [-1, 1] as PCM 16-bit little-endian bytes."""
    return (np.clip(samples, -1.0, 1.0 - 1.0 / 32768) * 32768.0).astype("<i2").tobytes()
