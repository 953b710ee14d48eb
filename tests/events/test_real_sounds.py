"""The ears on real recordings: door knocks, hand claps, applause, a doorbell, bells, footsteps, coughs,
music, a dog, a crowd and five speakers, cut out of Debian packages (tests/data/sounds/) and mixed into
scenes with known truth (tests/support/sound_set.py). Thresholds are issue 15's goals."""

from __future__ import annotations

from collections import defaultdict
from functools import cache

import pytest

from events.ears import Ears, EarsConfig
from events.hearing import Hearing
from events.onset import OnsetDetector
from events.stamp import Stamper
from events.vocabulary import Event, SoundOnset
from tests.support import sound_set
from tests.support.hearing_score import FRAME, KindScore, hear, is_its_onset, score, segments

GOAL_ONSETS = 0.9
GOAL_NAMES = 0.7


def onsets(scene: sound_set.Scene) -> list[float]:
    detector = OnsetDetector(Stamper("t"))
    found: list[float] = []
    for i in range(0, scene.audio.size, FRAME):
        found += [e.audio_ms for e in detector.feed(scene.audio[i : i + FRAME]) if isinstance(e, SoundOnset)]
    return found


@cache
def spoken(name: str) -> list[tuple[float, float]]:
    """The speech segments the voice detector alone cuts in scene ``name`` (once per process: several
    tests read them)."""
    scene = sound_set.scene(name)
    ears = Ears(Stamper("v"), EarsConfig(levels=None, turn=None, onset=None))
    events: list[Event] = []
    for i in range(0, scene.audio.size, FRAME):
        events += ears.feed(scene.audio[i : i + FRAME])
    return segments(events + ears.flush())


@pytest.fixture(scope="module")
def heard() -> dict[str, KindScore]:
    """Every scene through the ears with YAMNet looking, scored per kind (one run for the naming tests)."""
    hearing = Hearing(transcripts=None)
    total: dict[str, KindScore] = defaultdict(KindScore)
    for name in sound_set.SCENES:
        scene = sound_set.scene(name)
        score(scene, hear(scene, hearing), total)
    return total


@pytest.mark.parametrize("kind", sound_set.IMPULSIVE)
def test_real_knocks_and_claps_not_under_speech_give_onsets(kind):
    # The goal is over the whole set: in the loud fan, a train of quieter knocks 12 dB over the motor can
    # still go unheard.
    hits, missed = 0, []
    for name in sound_set.SCENES:
        scene = sound_set.scene(name)
        found = onsets(scene)
        for t in scene.truth:
            if t.kind == kind and not t.under_speech:
                hit = any(is_its_onset(t, at) for at in found)
                hits += hit
                missed += [] if hit else [f"{name}: {t.clip}"]
    assert hits >= GOAL_ONSETS * (hits + len(missed)), missed


@pytest.mark.parametrize("name", list(sound_set.SCENES))
def test_real_background_noise_gives_no_onset(name):
    # A distant street and a vacuum cleaner's motor: every onset lies inside a sound that was placed.
    scene = sound_set.scene(name)
    stray = [at for at in onsets(scene) if not any(t.start_ms - 30 <= at <= t.end_ms for t in scene.truth)]
    assert stray == []


@pytest.mark.parametrize("name", list(sound_set.SCENES))
def test_every_real_spoken_line_is_heard_as_speech(name):
    scene = sound_set.scene(name)
    lines = [t for t in scene.truth if t.kind == "speech"]
    missed = [t.clip for t in lines if not any(t.start_ms < s1 and s0 < t.end_ms for s0, s1 in spoken(name))]
    assert missed == []


@pytest.mark.parametrize("name", list(sound_set.SCENES))
def test_real_knocks_claps_and_doorbells_alone_start_no_speech(name):
    scene = sound_set.scene(name)
    triggers = [
        t for t in scene.truth if t.kind in sound_set.NAMED and t.kind != "applause" and not t.under_speech
    ]
    lines = [t for t in scene.truth if t.kind == "speech"]
    started = [
        t.clip
        for s0, s1 in spoken(name)
        if not any(u.start_ms < s1 and s0 < u.end_ms for u in lines)
        for t in triggers
        if t.start_ms < s1 and s0 < t.end_ms
    ]
    assert started == []


LEAD_MS = 100.0  # a segment the model opened at a sound may end just before the sound's truth start,
# which is where it first stands 40 dB out of the noise


def non_speech_that_started_speech(kind: str) -> list[tuple[str, str]]:
    """(scene, clip) of each sound of ``kind`` that a speech segment overlapping no spoken line overlaps."""
    started = []
    for name in sound_set.SCENES:
        scene = sound_set.scene(name)
        lines = [t for t in scene.truth if t.kind == "speech"]
        for s0, s1 in spoken(name):
            if not any(u.start_ms < s1 and s0 < u.end_ms for u in lines):
                started += [
                    (name, t.clip)
                    for t in scene.truth
                    if t.kind == kind and t.start_ms - LEAD_MS < s1 and s0 < t.end_ms
                ]
    return started


@pytest.mark.parametrize("kind", ["applause", "bell", "music"])
def test_applause_bells_and_music_start_no_speech(kind):
    started = non_speech_that_started_speech(kind)
    assert [(scene, clip) for scene, clip in started if clip not in sound_set.VOICED_APPLAUSE] == []


@pytest.mark.xfail(
    strict=True,
    reason="GCompris's applause opens with ~90 ms of a shout at 141 Hz (YAMNet, given it alone: Speech, Groan, "
    "Shout) that the model scores as speech even from a fresh state: nothing heard within the 64 ms a start "
    "may take tells it from a vowel (docs/hearing.md). The other applause that opens with a voice (a whoop) "
    "starts none in the set, and the four recordings without a voice start none (the test above).",
)
def test_applause_that_opens_with_a_voice_starts_no_speech():
    started = non_speech_that_started_speech("applause")
    assert [(scene, clip) for scene, clip in started if clip in sound_set.VOICED_APPLAUSE] == []


@pytest.mark.parametrize("kind", ["knock", "clap"])
def test_real_knocks_and_claps_are_named(heard, kind):
    assert heard[kind].named >= GOAL_NAMES * heard[kind].count


def test_real_doorbells_and_applause_are_named(heard):
    for kind in ("doorbell", "applause"):
        assert heard[kind].named >= GOAL_NAMES * heard[kind].count, kind


def test_knocks_claps_applause_and_doorbells_get_no_wrong_name(heard):
    # What a reflex answers must come alone: a doorbell's fading chime was once "Music", a train of claps and
    # the doorbell in the fan "Glass".
    assert {kind: dict(heard[kind].false_names) for kind in sound_set.NAMED} == {
        k: {} for k in sound_set.NAMED
    }


def test_nothing_is_named_where_no_sound_was_placed_nor_on_speech(heard):
    assert dict(heard["(none)"].false_names) == {}
    assert dict(heard["speech"].false_names) == {}
