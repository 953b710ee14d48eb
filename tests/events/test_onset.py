"""The onset detector on synthetic knocks and claps, over silence, room tone and steady noise; and speech;
and its hunches on the real recordings."""

from __future__ import annotations

import math

import numpy as np
import pytest

from events.onset import OnsetConfig, OnsetDetector
from events.stamp import Stamper
from events.vocabulary import SoundOnset
from tests import sounds
from tests.support import sound_set
from tests.support.events import only

BACKGROUNDS = {"silence": 0.0, "room_tone": 0.003, "steady_noise": 0.02}


def onsets(
    audio: np.ndarray, sizes: list[int] | None = None, config: OnsetConfig | None = None
) -> list[SoundOnset]:
    return only(SoundOnset, sounds.feed(OnsetDetector(Stamper("t"), config), audio, sizes))


def background(name: str, seconds: float) -> np.ndarray:
    return sounds.noise(seconds, BACKGROUNDS[name], seed=3)


def knocks_and_claps(bg: np.ndarray) -> tuple[np.ndarray, list[float]]:
    """Three knocks, then four claps 400 ms apart, placed on ``bg``; returns the audio and true onsets."""
    knocks, starts = sounds.knocks(3)
    audio, at = sounds.place(bg, knocks, 0.5)
    truth = [at + s for s in starts]
    for i in range(4):
        audio, at = sounds.place(audio, sounds.clap(i), 1.5 + 0.4 * i)
        truth.append(at)
    return audio, truth


@pytest.mark.parametrize("name", BACKGROUNDS)
def test_every_knock_and_clap_gives_one_onset_within_50_ms(name):
    audio, truth = knocks_and_claps(background(name, 3.5))
    found = [e.audio_ms for e in onsets(audio)]
    assert len(found) == len(truth), (found, truth)
    for at, true in zip(found, truth, strict=True):
        assert abs(at - true) <= 50, (found, truth)


def test_an_onset_is_reported_once_its_confirmation_time_has_passed():
    # The detector listens confirm_ms after a rise (60 ms: a real clap's bursts take 40) and reports on the
    # next hop: that, not the framing, is the whole delay.
    audio, truth = knocks_and_claps(background("room_tone", 3.5))
    detector = OnsetDetector(Stamper("t"))
    heard = []
    for i in range(0, audio.size, 80):  # 5 ms frames: the delay is the detector's, not the framing's
        for event in detector.feed(audio[i : i + 80]):
            assert isinstance(event, SoundOnset)
            heard.append((i + 80) * 1000 / sounds.RATE - event.audio_ms)
    assert len(heard) == len(truth)
    cfg = detector.config
    assert max(heard) <= cfg.confirm_ms + 2 * cfg.hop_ms, heard


@pytest.mark.parametrize("name", BACKGROUNDS)
def test_silence_and_steady_noise_give_no_onset(name):
    assert onsets(background(name, 5.0)) == []


def test_noise_that_switches_on_and_stays_is_not_an_onset():
    audio = np.concatenate([sounds.silence(0.5), sounds.noise(2.0, 0.1)])
    assert onsets(audio) == []


@pytest.mark.parametrize(
    "text",
    [
        "Hello there, how are you doing today?",
        "Please tell me a story about a dragon.",
        "I would like to hear some music.",
        # Staccato: over an early span of 45 ms or less its first syllable passes as an impulse.
        "Top, tip, tap. Get back!",
    ],
)
def test_ordinary_speech_gives_no_onset(text):
    # One rendition, the same every run: with Piper's sampling noise a rare rendition of the dragon
    # sentence gave an onset (once, in a loaded fresh-clone run; 0 in 60 renditions tried after), noted for
    # issue 15's false-onset work rather than left to chance here.
    speech = sounds.speech(text, sampling_noise=False)
    for bg in ("silence", "room_tone"):
        audio = np.concatenate([sounds.silence(0.5), speech, sounds.silence(0.5)])
        audio += background(bg, audio.size / sounds.RATE)
        assert onsets(audio) == [], bg


def test_impulses_closer_than_the_refractory_period_give_one_onset():
    audio, _ = sounds.place(sounds.silence(1.0), sounds.knock(0), 0.3)
    audio, _ = sounds.place(audio, sounds.knock(1), 0.36)
    assert len(onsets(audio)) == 1
    assert len(onsets(audio, config=OnsetConfig(refractory_ms=40.0))) == 2


def test_any_split_into_frames_gives_the_same_onsets():
    audio, _ = knocks_and_claps(background("room_tone", 3.5))
    whole = [(e.audio_ms, e.strength_db) for e in onsets(audio)]
    assert len(whole) == 7
    for sizes in ([1], [37], [511], [4000]):
        assert [(e.audio_ms, e.strength_db) for e in onsets(audio, sizes)] == whole


def test_strength_is_the_height_above_the_noise_floor():
    quiet, _ = knocks_and_claps(background("room_tone", 3.5))
    noisy, _ = knocks_and_claps(background("steady_noise", 3.5))
    assert min(e.strength_db for e in onsets(quiet)) > max(e.strength_db for e in onsets(noisy)) + 10


@pytest.mark.parametrize(
    "fields",
    [{"hop_ms": 5.01}, {"confirm_ms": 5.0}, {"early_ms": 25.0}, {"early_ms": 65.0}, {"jump_db": -1.0}],
)
def test_config_refuses_impossible_settings(fields):
    with pytest.raises(ValueError):
        OnsetConfig(**fields)


def told(
    audio: np.ndarray, frame: int = 320, config: OnsetConfig | None = None
) -> list[tuple[float, str, float]]:
    """(stream ms when told, what, its audio_ms) for every hunch, dropped hunch and onset, in order."""
    detector = OnsetDetector(Stamper("t"), config)
    out: list[tuple[float, str, float]] = []
    for i in range(0, audio.size, frame):
        events = only(SoundOnset, detector.feed(audio[i : i + frame]))
        now = (i + frame) * 1000 / sounds.RATE
        out += [(now, "dropped" if h.dropped else "hunch", h.audio_ms) for h in detector.take_hunches()]
        out += [(now, "onset", e.audio_ms) for e in events]
    detector.flush()
    out += [(math.inf, "dropped" if h.dropped else "hunch", h.audio_ms) for h in detector.take_hunches()]
    return out


def test_the_real_onsets_were_hunches_a_confirmation_earlier():
    # What a reaction is prepared on: the knocks and claps of the real set, and their hunches 50-60 ms sooner
    # (109 of 110 here: one knock in the fan's noise rose above the floor only as it was 60 ms later). The
    # detector tells "dropped" once no onset came near a hunch, so a hunch still open can become the onset.
    onsets, early = 0, []
    for name in sound_set.SCENES:
        open_: dict[float, float] = {}  # hunch audio_ms -> when told
        for now, what, at in told(sound_set.scene(name).audio):
            if what == "hunch":
                open_[at] = now
            elif what == "dropped":
                del open_[at]
            else:
                onsets += 1
                near = [h for h in open_ if abs(h - at) <= 4 * 5.0]  # the rise is refined within two hops
                assert len(near) <= 1, (name, at, sorted(open_))
                early += [now - open_.pop(h) for h in near]
        assert not open_, name  # every hunch answered, by an onset or dropped
    assert len(early) >= 0.97 * onsets, (len(early), onsets)
    assert min(early) >= OnsetConfig().early_ms - 20.0, early  # told with 20 ms frames


def confirmed_after_hunch(clip: str, config: OnsetConfig | None = None) -> list[float]:
    """How long after its hunch each onset of a real recording, alone in room tone, is told (5 ms frames:
    to the hop)."""
    audio = np.concatenate(
        [background("room_tone", 0.5), sound_set.at_peak(clip, -12.0), sounds.silence(0.5)]
    )
    log = told(audio, frame=80, config=config)
    hunches = [now for now, what, _ in log if what == "hunch"]
    return [now - max(h for h in hunches if h <= now) for now, what, _ in log if what == "onset"]


def test_a_knock_that_has_died_away_is_confirmed_early_and_a_clap_after_its_bursts():
    # A real knock has fallen away 50 ms after its rise (early_ms); Hydrogen's claps' later bursts keep the
    # judgment open a hop longer; without the early span both wait the full 60 ms (confirm_ms).
    cfg = OnsetConfig()
    late = OnsetConfig(early_ms=cfg.confirm_ms)
    for clip in ("knock_a", "knock_b", "knock_c"):
        [after] = confirmed_after_hunch(clip)
        assert after <= cfg.early_ms, clip
        [after] = confirmed_after_hunch(clip, late)
        assert after >= cfg.confirm_ms - cfg.hop_ms, clip
    for clip in ("clap_gimme_soft", "clap_gimme_hard"):
        [after] = confirmed_after_hunch(clip)
        assert cfg.early_ms < after < cfg.confirm_ms, clip
        assert confirmed_after_hunch(clip, late) == [cfg.confirm_ms], clip


def test_silence_steady_noise_and_speech_give_no_hunch_that_is_not_dropped():
    speech = sounds.speech("Please tell me a story about a dragon.", sampling_noise=False)
    audio = np.concatenate([sounds.silence(0.5), speech, sounds.silence(0.5)])
    audio += background("room_tone", audio.size / sounds.RATE)
    noise = background("steady_noise", 2.0)
    for clip in (audio, noise, sounds.silence(1.0)):
        log = told(clip)
        assert [what for _, what, _ in log if what != "dropped"] == [
            what for _, what, _ in log if what == "hunch"
        ]
        assert sorted(at for _, what, at in log if what == "hunch") == sorted(
            at for _, what, at in log if what == "dropped"
        )
