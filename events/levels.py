"""Loudness of the input, frame by frame: RMS in dBFS, peak, and the voice's pitch where there is one.

One ``AudioLevel`` per ``frame_ms`` (20 ms by default, 50 a second), at the position where its frame ends,
so listening behaviour and, later, the mouth can follow the voice. Frames are cut at fixed stream
positions, so the levels do not depend on how the stream was split when it arrived.

Pitch is the normalised square difference function of McLeod and Wolf (2005) over the last 40 ms: the
first peak within 90 % of the highest one, refined by a parabola. It is reported only on frames loud
enough (``pitch_min_db``) whose periodicity is clear (``pitch_clarity``), so noise and silence give None.
It costs about 30 µs a frame.
"""

from __future__ import annotations

import math

import msgspec
import numpy as np

from events.audio import SAMPLE_RATE
from events.stamp import Stamper
from events.vocabulary import AudioLevel, Event

SILENCE_DB = -120.0  # what digital silence reads as (a finite number, so it serialises to JSON)


class LevelConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How often levels are reported and when a pitch is given."""

    frame_ms: float = 20.0
    """Length of each measured frame (a whole number of samples at 16 kHz)."""
    pitch: bool = True
    """Whether to estimate the pitch of voiced frames."""
    pitch_min_hz: float = 60.0
    pitch_max_hz: float = 500.0
    pitch_min_db: float = -45.0
    """Frames quieter than this (RMS dBFS) get no pitch."""
    pitch_clarity: float = 0.6
    """How periodic a frame must be (the NSDF peak, 0..1) to get a pitch."""

    def __post_init__(self) -> None:
        samples = self.frame_ms * SAMPLE_RATE / 1000
        if samples < 1 or samples != int(samples):
            raise ValueError(
                f"frame_ms must be a whole number of samples at {SAMPLE_RATE} Hz, got {self.frame_ms}"
            )
        if not 0 < self.pitch_min_hz < self.pitch_max_hz < SAMPLE_RATE / 4:
            raise ValueError(f"need 0 < pitch_min_hz < pitch_max_hz < {SAMPLE_RATE // 4}")
        if not 0.0 < self.pitch_clarity <= 1.0:
            raise ValueError(f"pitch_clarity must be in (0, 1], got {self.pitch_clarity}")


class PitchTracker:
    """Pitch of a short window by the normalised square difference function (None if not periodic)."""

    def __init__(self, window: int, min_hz: float, max_hz: float, clarity: float) -> None:
        self.window = window
        self.min_lag = max(2, math.floor(SAMPLE_RATE / max_hz))
        self.max_lag = min(window - 2, math.ceil(SAMPLE_RATE / min_hz))
        if self.max_lag <= self.min_lag + 2:
            raise ValueError(f"a {window}-sample window cannot hold {min_hz} Hz")
        self.clarity = clarity
        # Zero padding to window + max_lag is enough: the circular wrap then never reaches a lag we read.
        self._nfft = 1 << (window + self.max_lag).bit_length()

    def __call__(self, x: np.ndarray) -> float | None:
        x = x.astype(np.float64) - x.mean()
        spectrum = np.fft.rfft(x, self._nfft)
        acf = np.fft.irfft(spectrum.real**2 + spectrum.imag**2, self._nfft)[: self.max_lag + 2]
        # m(tau) = sum of x[i]^2 + x[i+tau]^2 over the overlap, from cumulative energies.
        energy = np.cumsum(x * x)
        total = energy[-1]
        if total <= 0.0:
            return None
        lags = np.arange(self.max_lag + 2)
        head = energy[self.window - 1 - lags]  # sum of x[:n - tau]^2
        tail = total - np.concatenate(([0.0], energy[: self.max_lag + 1]))  # sum of x[tau:]^2
        nsdf = 2.0 * acf / np.maximum(head + tail, 1e-20)
        seg = nsdf[self.min_lag - 1 : self.max_lag + 2]
        peaks = np.flatnonzero((seg[1:-1] > seg[:-2]) & (seg[1:-1] >= seg[2:]) & (seg[1:-1] > 0)) + 1
        if peaks.size == 0:
            return None
        best = seg[peaks].max()
        if best < self.clarity:
            return None
        k = int(peaks[np.argmax(seg[peaks] >= 0.9 * best)])
        a, b, c = seg[k - 1], seg[k], seg[k + 1]
        shift = 0.5 * (a - c) / (a - 2 * b + c) if a - 2 * b + c < 0 else 0.0
        # A Python float: a numpy scalar in an event cannot be encoded for a client.
        return float(SAMPLE_RATE / (self.min_lag - 1 + k + shift))


class LevelMeter:
    """Streaming loudness: ``feed`` any number of samples, get one ``AudioLevel`` per complete frame."""

    def __init__(self, stamp: Stamper, config: LevelConfig | None = None) -> None:
        self.config = config if config is not None else LevelConfig()
        self._stamp = stamp
        self._frame = round(self.config.frame_ms * SAMPLE_RATE / 1000)
        # Pitch looks at 40 ms (two periods of 50 Hz) however short the frame: the frame plus what came before.
        self._window = max(self._frame, round(0.04 * SAMPLE_RATE))
        self._pitch = (
            PitchTracker(
                self._window, self.config.pitch_min_hz, self.config.pitch_max_hz, self.config.pitch_clarity
            )
            if self.config.pitch
            else None
        )
        self._recent = np.zeros(self._window, dtype=np.float32)  # the last samples of complete frames
        self._pending = np.zeros(self._frame, dtype=np.float32)
        self._filled = 0
        self._frames = 0  # complete frames measured

    @property
    def position(self) -> int:
        """Samples fed so far."""
        return self._frames * self._frame + self._filled

    def feed(self, samples: np.ndarray) -> list[Event]:
        """Take the next samples (float32, 16 kHz mono) and return the levels of the frames they complete."""
        events: list[Event] = []
        i, n = 0, samples.size
        if self._filled:
            take = min(self._frame - self._filled, n)
            self._pending[self._filled : self._filled + take] = samples[:take]
            self._filled += take
            i = take
            if self._filled < self._frame:
                return events
            self._measure(self._pending, events)
            self._filled = 0
        whole = (n - i) // self._frame * self._frame
        for start in range(i, i + whole, self._frame):
            self._measure(samples[start : start + self._frame], events)
        rest = samples[i + whole :]
        self._pending[: rest.size] = rest
        self._filled = rest.size
        return events

    def _measure(self, frame: np.ndarray, events: list[Event]) -> None:
        self._frames += 1
        if self._frame >= self._window:
            self._recent[:] = frame[-self._window :]
        else:
            self._recent[: -self._frame] = self._recent[self._frame :]
            self._recent[-self._frame :] = frame
        power = float(np.dot(frame, frame)) / frame.size
        rms_db = 10.0 * math.log10(power) if power > 1e-12 else SILENCE_DB
        peak = float(np.max(np.abs(frame)))
        pitch = None
        if (
            self._pitch is not None
            and rms_db >= self.config.pitch_min_db
            and self._frames * self._frame >= self._window
        ):
            pitch = self._pitch(self._recent)
        at = self._frames * self._frame * 1000.0 / SAMPLE_RATE
        events.append(
            self._stamp(AudioLevel, audio_ms=at, rms_db=max(rms_db, SILENCE_DB), peak=peak, pitch_hz=pitch)
        )

    def flush(self) -> list[Event]:
        """End the stream. Nothing is open: a partial last frame waits for the samples that complete it."""
        return []
