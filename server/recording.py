"""Saving what a session sent: its video frames as a video file and the character's voice as a WAV.

Frames and audio slices are placed by their ``pts_ms``, not by arrival, so a late or dropped frame leaves
the picture standing (or silence) for its slot instead of shifting everything after it. MP4 (H.264 + AAC)
needs PyAV (``av``); animated WebP and GIF need only Pillow.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image
from scipy.io import wavfile

from server.client import AudioFrame, VideoFrame

VIDEO_SUFFIXES = (".mp4", ".webp", ".gif")


def mp4_available() -> bool:
    """Whether PyAV is installed (it carries its own FFmpeg with H.264 and AAC)."""
    try:
        import av  # noqa: F401
    except ImportError:
        return False
    return True


def voice_track(audio: Sequence[AudioFrame], rate: int) -> np.ndarray:
    """The character's audio as one int16 array, each slice at its ``pts_ms`` (silence where none came)."""
    if not audio:
        return np.zeros(0, dtype=np.int16)
    slices = [(round(a.header["pts_ms"] * rate / 1000), np.frombuffer(a.pcm, dtype="<i2")) for a in audio]
    track = np.zeros(max(start + s.size for start, s in slices), dtype=np.int16)
    for start, samples in slices:
        track[start : start + samples.size] = samples
    return track


def save_wav(path: Path, audio: Sequence[AudioFrame], rate: int) -> Path:
    """Write the character's audio (``voice_track``) as a 16-bit mono WAV."""
    wavfile.write(path, rate, voice_track(audio, rate))
    return path


def save_video(
    path: Path, frames: Sequence[VideoFrame], fps: int, audio: Sequence[AudioFrame], rate: int
) -> Path:
    """Write ``frames`` to ``path`` (.mp4 with the audio muxed in, .webp or .gif without it)."""
    if not frames:
        raise ValueError("no video frames to save")
    suffix = path.suffix.lower()
    if suffix == ".mp4":
        _save_mp4(path, frames, fps, voice_track(audio, rate), rate)
    elif suffix in (".webp", ".gif"):
        _save_animation(path, frames, fps)
    else:
        raise ValueError(f"unknown video format {suffix!r}: use one of {', '.join(VIDEO_SUFFIXES)}")
    return path


def _slot(frame: VideoFrame, fps: int) -> int:
    return round(frame.header["pts_ms"] * fps / 1000)


def _rgb(frame: VideoFrame) -> Image.Image:
    return Image.open(io.BytesIO(frame.jpeg)).convert("RGB")


def _save_animation(path: Path, frames: Sequence[VideoFrame], fps: int) -> None:
    # A frame lasts until the next one's slot: a gap in the stream shows as the last picture held.
    slots = [_slot(f, fps) for f in frames]
    durations = [max(1, b - a) * 1000 / fps for a, b in zip(slots, [*slots[1:], slots[-1] + 1], strict=True)]
    images = [_rgb(f) for f in frames]
    images[0].save(
        path, save_all=True, append_images=images[1:], duration=durations, loop=0, **_format_options(path)
    )


def _format_options(path: Path) -> dict[str, Any]:
    return {"lossless": False, "quality": 90} if path.suffix.lower() == ".webp" else {}


def _save_mp4(path: Path, frames: Sequence[VideoFrame], fps: int, voice: np.ndarray, rate: int) -> None:
    import av

    first = _rgb(frames[0])
    with av.open(str(path), "w") as container:
        video = container.add_stream("libx264", rate=fps)
        video.width, video.height = first.size
        video.pix_fmt = "yuv420p"
        video.time_base = Fraction(1, fps)
        sound = container.add_stream("aac", rate=rate)
        sound.layout = "mono"
        base = _slot(frames[0], fps)
        for frame in frames:
            picture = av.VideoFrame.from_ndarray(np.asarray(_rgb(frame)), format="rgb24")
            picture.pts = _slot(frame, fps) - base
            container.mux(video.encode(picture))
        container.mux(video.encode())
        # The voice track starts at pts 0 of the session; cut it to the first frame's slot so both align.
        voice = voice[round(base * rate / fps) :]
        step = rate // fps
        for start in range(0, voice.size, step):
            chunk = av.AudioFrame.from_ndarray(voice[None, start : start + step], format="s16", layout="mono")
            chunk.sample_rate = rate
            chunk.pts = start
            container.mux(sound.encode(chunk))
        container.mux(sound.encode())
