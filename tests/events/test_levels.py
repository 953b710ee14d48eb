"""The level meter: loudness every 20 ms, and pitch on voiced frames."""

from __future__ import annotations

import math

import numpy as np
import pytest

from events.levels import SILENCE_DB, LevelConfig, LevelMeter
from events.stamp import Stamper
from events.vocabulary import AudioLevel
from tests import sounds
from tests.support.events import only


def levels(
    audio: np.ndarray, sizes: list[int] | None = None, config: LevelConfig | None = None
) -> list[AudioLevel]:
    return only(AudioLevel, sounds.feed(LevelMeter(Stamper("t"), config), audio, sizes))


def tone(f0: float, seconds: float = 1.0, amplitude: float = 0.3) -> np.ndarray:
    """A sawtooth (rich in harmonics, like a voice) at ``f0``."""
    t = np.arange(round(seconds * sounds.RATE)) / sounds.RATE
    return (amplitude * (2 * ((t * f0) % 1) - 1)).astype(np.float32)


def test_a_level_comes_every_20_ms_at_the_end_of_its_frame():
    out = levels(sounds.noise(1.01, 0.05))
    assert [e.audio_ms for e in out] == [20.0 * (i + 1) for i in range(50)]


def test_rms_and_peak_of_a_sine_are_exact():
    t = np.arange(sounds.RATE) / sounds.RATE
    sine = (0.5 * np.sin(2 * np.pi * 1000 * t)).astype(np.float32)
    for e in levels(sine):
        assert e.rms_db == pytest.approx(20 * math.log10(0.5 / math.sqrt(2)), abs=0.01)
        assert e.peak == pytest.approx(0.5, abs=1e-3)


def test_digital_silence_reads_as_the_silence_floor_without_pitch():
    out = levels(sounds.silence(0.5))
    assert {(e.rms_db, e.peak, e.pitch_hz) for e in out} == {(SILENCE_DB, 0.0, None)}


@pytest.mark.parametrize("f0", [80.0, 120.0, 200.0, 330.0])
def test_pitch_of_a_harmonic_tone_is_within_2_percent(f0):
    pitches = [e.pitch_hz for e in levels(tone(f0))[2:]]
    assert all(p is not None and abs(p - f0) <= 0.02 * f0 for p in pitches), pitches


def test_noise_has_no_pitch():
    assert all(e.pitch_hz is None for e in levels(sounds.noise(2.0, 0.05)))


def test_speech_has_a_pitch_in_the_voice_range_on_most_voiced_frames():
    speech = sounds.speech("Hello there, how are you doing today?")
    out = levels(speech)
    loud = [e for e in out if e.rms_db > -30]
    pitched = [e.pitch_hz for e in loud if e.pitch_hz is not None]
    assert len(pitched) >= 0.5 * len(loud)
    assert 70 <= float(np.median(pitched)) <= 200  # the voice is an adult male's


def test_any_split_into_frames_gives_the_same_levels():
    audio = np.concatenate(
        [sounds.speech("Can you wave at me?"), sounds.knocks(2)[0], sounds.noise(0.3, 0.01)]
    )
    whole = [(e.audio_ms, e.rms_db, e.peak, e.pitch_hz) for e in levels(audio)]
    for sizes in ([1], [37], [511], [4000]):
        assert [(e.audio_ms, e.rms_db, e.peak, e.pitch_hz) for e in levels(audio, sizes)] == whole


def test_pitch_can_be_switched_off():
    assert all(e.pitch_hz is None for e in levels(tone(150.0), config=LevelConfig(pitch=False)))


@pytest.mark.parametrize("fields", [{"frame_ms": 20.03}, {"pitch_min_hz": 600.0}, {"pitch_clarity": 0.0}])
def test_config_refuses_impossible_settings(fields):
    with pytest.raises(ValueError):
        LevelConfig(**fields)
