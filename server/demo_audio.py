"""Sounds made on the spot, with nothing downloaded: Piper speech, synthetic knocks and claps, noise.

They make the listening demo (``onstage listen --demo``), and the tests and benchmarks use the same
sounds. Everything is 16 kHz mono float32 in [-1, 1], the rate the ears listen at.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
from scipy.io import wavfile
from scipy.signal import iirpeak, lfilter

from server.voice import Voice

RATE = 16_000


def speech(text: str, sampling_noise: bool = True) -> np.ndarray:
    """``text`` spoken by Piper's en_US voice at 16 kHz, leading and trailing silence trimmed.

    With ``sampling_noise=False`` the same text gives the same samples every run.
    """
    return trim(Voice(RATE, sampling_noise).synthesize(text).samples)


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
    """One knuckle knock on a wooden door (~150 ms): a 0.3 ms contact pulse striking the door's modes.

    A door panel rings in many modes between ~250 Hz and 3.5 kHz; wood damps them fast (Q about 30, so a
    mode at f Hz decays with a time constant of 30 / (pi f)). ``seed`` picks the modes (where on the door
    the knuckle lands). YAMNet scores three of these 0.18 s apart as "Knock" at 0.8-0.9 in silence and
    0.2-0.7 in quiet room noise. Modes below ~250 Hz made silero-vad call a run of them speech.
    """
    rng = np.random.default_rng(seed)
    t = np.arange(round(0.15 * RATE)) / RATE
    freqs = np.exp(rng.uniform(np.log(250.0), np.log(3500.0), 80))
    amps = (freqs / 250.0) ** 0.2 * rng.uniform(0.5, 1.0, freqs.size)
    taus = 30.0 / (np.pi * freqs)
    ring = (amps[:, None] * np.exp(-t / taus[:, None]) * np.sin(2 * np.pi * freqs[:, None] * t)).sum(axis=0)
    pulse = np.sin(np.pi * np.arange(5) / 5)  # half a sine, 0.3 ms: the knuckle's contact
    out = np.convolve(ring, pulse)[: t.size]
    return (0.9 * out / np.max(np.abs(out))).astype(np.float32)


def knocks(n: int = 3, gap_s: float = 0.18, seed: int = 0) -> tuple[np.ndarray, list[float]]:
    """``n`` knocks ``gap_s`` apart; returns the audio and each knock's start in ms."""
    return _train(knock, n, gap_s, seed)


def clap(seed: int = 0) -> np.ndarray:
    """A hand clap (~150 ms): a noise burst rising in ~2 ms and decaying in ~25 ms, coloured by the hands.

    The air pocket between the palms rings near 2.4 kHz (Q about 6, filtered twice so that its skirts do
    not spill above 3 kHz) over a broad body around 900 Hz at 0.6 of its strength. Real claps (the
    Hydrogen kits in tests/data/sounds/) keep most of their first 10 ms between 1 and 3 kHz and little
    (0-17 %) above 3 kHz; these keep 2-11 % there, so the impulse namer (events/impulse_names.py) names
    them as it names real claps. YAMNet scores four of these 0.25 s apart as "Clapping" at up to 0.8 in
    silence (and "Finger snapping" as high).
    """
    rng = np.random.default_rng(seed)
    t = np.arange(round(0.15 * RATE)) / RATE
    burst = rng.standard_normal(t.size) * np.exp(-t / 0.025) * (1.0 - np.exp(-t / 0.002))
    b, a = iirpeak(2400.0 * rng.uniform(0.9, 1.1), 6.0, fs=RATE)
    ring = lfilter(b, a, lfilter(b, a, burst))
    b, a = iirpeak(900.0, 1.0, fs=RATE)
    body = lfilter(b, a, burst)
    out = ring / np.std(ring) + 0.6 * body / np.std(body)
    # Peak 0.6: its first 5 ms then carry about the energy of a knock's, as a real clap's and knock's do.
    return (0.6 * out / np.max(np.abs(out))).astype(np.float32)


def claps(n: int = 4, gap_s: float = 0.25, seed: int = 0) -> tuple[np.ndarray, list[float]]:
    """``n`` claps ``gap_s`` apart; returns the audio and each clap's start in ms."""
    return _train(clap, n, gap_s, seed)


def _train(make, n: int, gap_s: float, seed: int) -> tuple[np.ndarray, list[float]]:
    """``n`` sounds from ``make(seed)`` starting ``gap_s`` apart (each cut to ``gap_s`` if longer)."""
    step = round(gap_s * RATE)
    parts, starts = [], []
    for i in range(n):
        sound = make(seed + i)[:step]
        starts.append(i * step * 1000.0 / RATE)
        parts += [sound, silence(gap_s)[: step - sound.size]]
    return np.concatenate(parts), starts


def place(background: np.ndarray, sound: np.ndarray, at_s: float) -> tuple[np.ndarray, float]:
    """Mix ``sound`` into a copy of ``background`` starting at ``at_s``; returns the audio and start ms."""
    out = background.copy()
    start = round(at_s * RATE)
    out[start : start + sound.size] += sound[: max(0, out.size - start)]
    return out, start * 1000.0 / RATE


def demo_recording() -> np.ndarray:
    """About nine seconds: a spoken greeting, three knocks on a door, a question, then four claps."""
    room = noise(9.0, level=0.002, seed=7)
    audio, _ = place(room, speech("Hello there! Can you hear me?", sampling_noise=False), 0.5)
    audio, _ = place(audio, knocks()[0], 3.2)
    audio, _ = place(audio, speech("Who is at the door?", sampling_noise=False), 4.6)
    audio, _ = place(audio, claps()[0], 7.0)
    return audio


def write_demo_wav(path: Path | None = None) -> Path:
    """Write ``demo_recording`` as a 16-bit WAV (to a temporary file unless ``path`` is given)."""
    if path is None:
        path = Path(tempfile.gettempdir()) / "onstage-demo.wav"
    pcm = (np.clip(demo_recording(), -1.0, 1.0 - 1 / 32768) * 32768.0).astype("<i2")
    wavfile.write(path, RATE, pcm)
    return path
