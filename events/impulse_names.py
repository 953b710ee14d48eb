"""Names for impulses: a knock or a clap told apart by the spectrum of their first 10 ms, YAMNet advising.

YAMNet hears the real knocks of the test set as "Glass", "Tick" or nothing, and real hand claps as
"Clapping" only about one time in three (docs/hearing.md), but the two differ where they start. For each
onset the namer takes ``burst_ms`` from just before the loudest sample of its first ``peak_within_ms``,
takes away the room's power spectrum measured over the ``noise_ms`` before the onset, and measures the
burst's energy share below ``low_hz`` and above ``high_hz``. On the real recordings (tests/data/sounds/):
the knuckle raps on a door keep about a quarter of that energy above 3 kHz and almost none below 1 kHz;
the hand claps keep 0-17 % above 3 kHz (and 1-40 % below 1 kHz); footsteps, music and voiced speech
keep almost all of it below 1 kHz.

YAMNet's scores of the window that holds the onset advise, in this order:

- vetoes: where YAMNet hears speech, music or footsteps at least at their score in ``vetoes``, the
  impulse gets no name (a struck syllable, a drum beat, a step all give onsets too);
- a hand: where YAMNet itself is confident of "Knock" or "Clapping" (``trust``), that name stands;
- otherwise the shares decide: more than ``max_low`` below 1 kHz is no name (a thud, a step); else at
  least ``knock_min_high`` above 3 kHz is a knock, less is a clap.

The boundaries were fitted on the real recordings of tests/data/sounds/ (benchmarks/impulse_names.py
checks them leaving one recording out). Every real knock there comes from one GCompris recording of one
door, so the knock boundary rests on one door and one microphone: a dull knock on a heavy door (most of
its energy below 1 kHz) gets no name from the spectrum, only YAMNet's.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec
import numpy as np

from events.audio import SAMPLE_RATE

KNOCK = "Knock"
CLAP = "Clapping"
FFT_SIZE = 512


class ImpulseNameConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Where the namer looks and the boundaries it applies."""

    burst_ms: float = 10.0
    """How much of the impulse is measured: the ``burst_ms`` from just before its loudest sample."""
    peak_within_ms: float = 30.0
    """Where that loudest sample is looked for after the onset (a clap's bursts come within 40 ms, and an
    onset may be found on a quiet run-up before the strike: a knock's starts ~12 ms early in a quiet room)."""
    noise_ms: float = 60.0
    """How much of the room just before the onset is taken as its noise."""
    gap_ms: float = 5.0
    """The noise ends this long before the onset (an onset's refined position may sit a little late)."""
    low_hz: float = 1000.0
    high_hz: float = 3000.0
    knock_min_high: float = 0.2
    """A burst with at least this share above ``high_hz`` is a knock, one with less a clap."""
    max_low: float = 0.65
    """A burst with more than this share below ``low_hz`` is neither (a footstep, a voiced syllable)."""
    vetoes: dict[str, float] = msgspec.field(
        default_factory=lambda: {"Speech": 0.5, "Music": 0.5, "Walk, footsteps": 0.3}
    )
    """YAMNet label -> the score at which an impulse gets no name at all."""
    trust: dict[str, float] = msgspec.field(default_factory=lambda: {KNOCK: 0.5, CLAP: 0.5})
    """YAMNet label -> the score at which YAMNet's own name stands, whatever the spectrum says."""
    overruled: tuple[str, ...] = (KNOCK, CLAP, "Finger snapping")
    """YAMNet labels for impulses that the sound classifier does not emit, below their ``trust`` score, while
    its window holds an impulse the namer named otherwise (``SoundClassifier``)."""
    score: float = 0.5
    """The ``score`` a name from the spectrum carries (a YAMNet name carries YAMNet's, if higher)."""

    def __post_init__(self) -> None:
        if self.burst_ms <= 0 or self.noise_ms <= 0 or self.gap_ms < 0 or self.peak_within_ms < 0:
            raise ValueError("burst_ms and noise_ms must be positive, gap_ms and peak_within_ms not negative")
        if not 0 < self.low_hz < self.high_hz < SAMPLE_RATE / 2:
            raise ValueError(f"need 0 < low_hz < high_hz < {SAMPLE_RATE // 2}")

    @property
    def before_samples(self) -> int:
        """Samples before the onset the namer reads."""
        return round((self.noise_ms + self.gap_ms) * SAMPLE_RATE / 1000)

    @property
    def after_samples(self) -> int:
        """Samples after the onset the namer reads."""
        return round((self.peak_within_ms + self.burst_ms) * SAMPLE_RATE / 1000)


class Shares(msgspec.Struct, frozen=True):
    """An impulse's energy share below ``low_hz`` and above ``high_hz`` (noise subtracted), 0..1 each."""

    low: float
    high: float


def _power(frames: np.ndarray) -> np.ndarray:
    """The mean power spectrum of rows of samples, Hann-windowed, zero-padded to ``FFT_SIZE``."""
    window = np.hanning(frames.shape[1] + 2)[1:-1]
    spectrum = np.fft.rfft(frames * window, n=FFT_SIZE, axis=1)
    power: np.ndarray = np.mean(np.abs(spectrum) ** 2, axis=0)
    return power


def shares(audio: np.ndarray, onset: int, config: ImpulseNameConfig | None = None) -> Shares | None:
    """The shares of the impulse starting at sample ``onset`` of ``audio``; None if the audio does not hold
    the burst and the noise before it, or nothing is left once the noise is taken away."""
    cfg = config or ImpulseNameConfig()
    noise_start, noise_stop = onset - cfg.before_samples, onset - round(cfg.gap_ms * SAMPLE_RATE / 1000)
    if noise_start < 0 or onset + cfg.after_samples > audio.size:
        return None
    n = round(cfg.burst_ms * SAMPLE_RATE / 1000)
    lead = n // 10  # the burst starts 1 ms before its loudest sample, to hold the strike's rise
    peak = onset + int(np.argmax(np.abs(audio[onset : onset + cfg.after_samples - n])))
    start = max(onset, peak - lead)
    burst = _power(audio[None, start : start + n].astype(np.float64))
    noise = audio[noise_start:noise_stop].astype(np.float64)
    frames = noise[: noise.size // n * n].reshape(-1, n)
    room = _power(frames) if frames.size else np.zeros_like(burst)
    # The same windowed length on both sides, so their powers compare bin by bin.
    clean = np.maximum(burst - room, 0.0)
    total = float(clean.sum())
    if total <= 0.0:
        return None
    hz = np.fft.rfftfreq(FFT_SIZE, 1.0 / SAMPLE_RATE)
    return Shares(
        low=float(clean[hz < cfg.low_hz].sum() / total), high=float(clean[hz > cfg.high_hz].sum() / total)
    )


class Name(msgspec.Struct, frozen=True):
    """A name for an impulse and the score it carries."""

    label: str
    score: float


def name(
    found: Shares | None, scores: Mapping[str, float], config: ImpulseNameConfig | None = None
) -> Name | None:
    """An impulse's name from its shares and YAMNet's scores (label -> score) of a window holding it."""
    cfg = config or ImpulseNameConfig()
    if any(scores.get(label, 0.0) >= at for label, at in cfg.vetoes.items()):
        return None
    trusted = [
        (scores.get(label, 0.0), label) for label, at in cfg.trust.items() if scores.get(label, 0.0) >= at
    ]
    if trusted:
        score, label = max(trusted)
        return Name(label, round(score, 3))
    if found is None:
        return None
    if found.low > cfg.max_low:
        return None
    label = KNOCK if found.high >= cfg.knock_min_high else CLAP
    return Name(label, max(cfg.score, round(scores.get(label, 0.0), 3)))
