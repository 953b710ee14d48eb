"""The WebRTC media parts on their own: tracks that hold a bounded number of frames, dropping the oldest,
with pts on their own clocks; the microphone resampled from what browsers send to what the ears take."""

from __future__ import annotations

import fractions
import io

import av
import numpy as np
import pytest
from PIL import Image

from server.core.outputs import AudioOut, VideoOut
from server.webrtc.mic import MicResampler
from server.webrtc.tracks import VIDEO_CLOCK_RATE, VideoTrack, VoiceTrack

pytestmark = pytest.mark.asyncio


def jpeg(shade: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (32, 16), (shade, 255 - shade, 40)).save(out, "JPEG")
    return out.getvalue()


def video(frame: int, fps: int = 16) -> VideoOut:
    return VideoOut(
        chunk=frame // 4,
        frame=frame % 4,
        pts_ms=frame * 1000.0 / fps,
        width=32,
        height=16,
        reflects=(),
        gen_chunk=frame // 4,
        sent_ms=frame * 1000.0 / fps,
        jpeg=jpeg(frame * 20),
    )


async def test_a_video_track_keeps_the_newest_frames_and_stamps_them_on_the_90_khz_clock() -> None:
    track = VideoTrack(max_frames=4)
    for frame in range(10):
        track.put(video(frame))
    assert track.dropped == 6
    got = [await track.recv() for _ in range(4)]
    assert [f.pts for f in got] == [frame * VIDEO_CLOCK_RATE // 16 for frame in range(6, 10)]
    assert all(f.time_base == fractions.Fraction(1, VIDEO_CLOCK_RATE) for f in got)
    assert (got[0].width, got[0].height) == (32, 16)
    red = got[0].to_ndarray(format="rgb24")[..., 0].mean()
    assert abs(red - 120) < 8, red  # the picture of frame 6 (shade 120), not another one


async def test_a_voice_track_cuts_each_slice_into_20_ms_frames_with_continuous_pts_and_drops_the_oldest() -> (
    None
):
    rate = 24_000
    track = VoiceTrack(rate, max_s=0.1)  # five 20 ms frames at most
    for k in range(3):  # 3 slices of 1500 samples (a frame at 16 fps) = 4500 samples = 9 whole frames
        pcm = np.full(1500, k + 1, dtype="<i2").tobytes()
        track.put(AudioOut(pts_ms=k * 62.5, pcm=pcm, samples=1500))
    assert track.dropped == 4
    got = [await track.recv() for _ in range(5)]
    assert [f.samples for f in got] == [480] * 5
    assert [f.pts for f in got] == [0, 480, 960, 1440, 1920]  # the sender's clock runs on unbroken
    assert got[-1].to_ndarray()[0, -1] == 3  # the newest audio is what is kept


async def test_the_microphone_is_resampled_from_48_khz_stereo_to_16_khz_mono() -> None:
    resampler = MicResampler()
    t = np.arange(48_000) / 48_000
    tone = (np.sin(2 * np.pi * 440 * t) * 10_000).astype("<i2")
    pcm = []
    for start in range(0, tone.size, 960):  # 20 ms frames, as aiortc's Opus decoder gives them
        piece = np.repeat(tone[start : start + 960], 2).reshape(1, -1)  # interleaved stereo
        frame = av.AudioFrame.from_ndarray(piece, format="s16", layout="stereo")
        frame.sample_rate = 48_000
        pcm.append(resampler.pcm16(frame))
    out = np.frombuffer(b"".join(pcm), dtype="<i2")
    assert abs(out.size - 16_000) <= 64  # a few samples still in the filter
    spectrum = np.abs(np.fft.rfft(out[:15_000].astype(np.float64)))
    assert abs(np.argmax(spectrum) * 16_000 / 15_000 - 440) < 3
