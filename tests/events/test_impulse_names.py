"""The impulse namer on real recordings (tests/data/sounds/): a knock or a clap told by its first 10 ms."""

from __future__ import annotations

import numpy as np
import pytest

from events.impulse_names import CLAP, KNOCK, ImpulseNameConfig, name, shares
from events.onset import OnsetDetector
from events.stamp import Stamper
from events.vocabulary import SoundOnset
from tests.support import sound_set
from tests.support.sound_set import RATE

QUIET = {"Speech": 0.01, "Music": 0.0, "Walk, footsteps": 0.0, KNOCK: 0.0, CLAP: 0.0}
"""YAMNet's advice when it hears nothing it knows (what it gives most real knocks)."""


def in_room(clip: str, noise: str = "noise_street", noise_db: float = -60.0) -> tuple[np.ndarray, int]:
    """A clip 0.5 s into a room's noise, and the sample where the onset detector hears it start."""
    audio = sound_set.room(2.0, noise_db, noise)
    sound = sound_set.clip(clip) * 10 ** (-7 / 20)
    audio[RATE // 2 : RATE // 2 + sound.size] += sound[: audio.size - RATE // 2]
    detector = OnsetDetector(Stamper("t"))
    found = [
        e.audio_ms
        for i in range(0, audio.size, 320)
        for e in detector.feed(audio[i : i + 320])
        if isinstance(e, SoundOnset)
    ]
    assert found, clip
    return audio, round(found[0] * RATE / 1000)


@pytest.mark.parametrize("clip", ["knock_a", "knock_b", "knock_c", "knock_train3"])
@pytest.mark.parametrize("noise", [("noise_street", -60.0), ("noise_motor", -35.0)])
def test_a_real_knock_is_named_knock_from_its_spectrum_in_quiet_and_in_a_fan(clip, noise):
    audio, onset = in_room(clip, *noise)
    found = shares(audio, onset)
    named = name(found, QUIET)
    assert named is not None and named.label == KNOCK, found


@pytest.mark.parametrize("clip", sound_set.CLAPS)
def test_a_real_clap_is_named_clapping_from_its_spectrum(clip):
    audio, onset = in_room(clip)
    named = name(shares(audio, onset), QUIET)
    assert named is not None and named.label == CLAP and named.score == ImpulseNameConfig().score


@pytest.mark.parametrize("clip", ["step_wood_1", "step_hard_1", "step_hard_2"])
def test_a_real_footstep_gets_no_name_even_when_yamnet_hears_nothing(clip):
    audio, onset = in_room(clip)
    assert name(shares(audio, onset), QUIET) is None


def test_yamnet_hearing_speech_music_or_steps_vetoes_any_name():
    audio, onset = in_room("knock_b")
    found = shares(audio, onset)
    for label in ("Speech", "Music", "Walk, footsteps"):
        assert name(found, {**QUIET, label: 0.68}) is None, label


def test_yamnet_confident_of_a_knock_or_a_clap_overrules_the_spectrum():
    audio, onset = in_room("clap_gimme_med")
    named = name(shares(audio, onset), {**QUIET, KNOCK: 0.82})
    assert named is not None and (named.label, named.score) == (KNOCK, 0.82)


def test_an_onset_without_the_audio_around_it_is_not_measured():
    audio, onset = in_room("knock_b")
    assert shares(audio, 10) is None
    assert shares(audio[: onset + 100], onset) is None
