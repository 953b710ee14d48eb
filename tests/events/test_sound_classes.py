"""YAMNet sound classes on real audio made here: synthetic knocks and claps, Piper speech, noise."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from events.errors import BadInput
from events.onset import OnsetDetector
from events.sound_classes import SoundClassConfig, SoundClassifier
from events.stamp import Stamper
from events.vocabulary import SoundClass, SoundOnset
from events.yamnet import LOG_OFFSET, MEL_BANDS, PATCH_FRAMES, PATCH_SAMPLES, YamNet, log_mel_patch
from tests import sounds
from tests.support import sound_set
from tests.support.events import only

ALARMS = {"Knock", "Clapping"}


@pytest.fixture(scope="module")
def yamnet() -> YamNet:
    return YamNet()


def stream(
    model: YamNet,
    audio: np.ndarray,
    *,
    onsets_ms: Sequence[float] = (),
    frame: int = 320,
    config: SoundClassConfig | None = None,
) -> tuple[list[SoundClass], SoundClassifier]:
    """Feed ``audio`` frame by frame, reporting each onset (as the onset detector would) when it is fed."""
    stamper = Stamper("s")
    classifier = SoundClassifier(stamper, config, model=model)
    onsets = [stamper(SoundOnset, audio_ms=ms, strength_db=30.0) for ms in onsets_ms]
    events: list[SoundClass] = []
    for start in range(0, audio.size, frame):
        events += only(SoundClass, classifier.feed(audio[start : start + frame]))
        fed_ms = classifier.clock.ms()
        while onsets and onsets[0].audio_ms <= fed_ms:
            events += classifier.note_onset(onsets.pop(0))
    return events + only(SoundClass, classifier.flush()), classifier


def labels(events: list[SoundClass]) -> set[str]:
    return {e.label for e in events}


def test_the_front_end_gives_yamnet_patches_of_96_frames_by_64_mel_bands():
    silent = log_mel_patch(np.zeros(PATCH_SAMPLES, np.float32))
    assert silent.shape == (PATCH_FRAMES, MEL_BANDS)
    np.testing.assert_allclose(silent, np.log(LOG_OFFSET), rtol=1e-6)
    t = np.arange(PATCH_SAMPLES) / sounds.RATE
    low, high = (log_mel_patch(np.sin(2 * np.pi * f * t).astype(np.float32)) for f in (300.0, 3000.0))
    # Mel bands rise with frequency: a higher tone peaks in a higher band, in every frame alike.
    assert np.argmax(low.mean(axis=0)) < np.argmax(high.mean(axis=0))
    assert np.ptp(np.argmax(high, axis=1)) == 0


@pytest.mark.parametrize("seed", [0, 3, 6])
def test_a_run_of_knocks_on_a_door_is_heard_as_knock(yamnet, seed):
    knocks, starts = sounds.knocks(3, seed=seed)
    audio, at_ms = sounds.place(sounds.silence(3.0), knocks, 0.8)
    events, _ = stream(yamnet, audio)
    knock = [e for e in events if e.label == "Knock"]
    assert len(knock) == 1, events
    # The window that heard it ends after the first knock and still holds it (0.975 s long).
    assert at_ms < knock[0].audio_ms < at_ms + starts[-1] + PATCH_SAMPLES / 16
    assert not labels(events) & {"Clapping", "Music", "Laughter"}
    print(f"Knock score (seed {seed}): {knock[0].score}")


def test_an_onset_report_gets_its_own_look_and_its_id_on_the_knock_even_in_room_noise(yamnet):
    knocks, starts = sounds.knocks(3, seed=1)
    audio, at_ms = sounds.place(sounds.noise(3.0, level=0.001, seed=1), knocks, 1.13)
    config = SoundClassConfig(hop_ms=0)  # onsets only, so the look is the onset's
    events, classifier = stream(yamnet, audio, onsets_ms=[at_ms + s for s in starts], config=config)
    knock = [e for e in events if e.label == "Knock"]
    assert len(knock) == 1, events
    assert knock[0].onset_id is not None
    looks = {at_ms + s + delay for s in starts for delay in config.onset_delays_ms}
    assert knock[0].audio_ms in looks
    assert classifier.windows_classified == len(looks)


def test_hand_claps_are_heard_as_clapping(yamnet):
    claps, starts = sounds.claps(4)
    audio, at_ms = sounds.place(sounds.silence(3.0), claps, 0.7)
    events, _ = stream(yamnet, audio, onsets_ms=[at_ms + s for s in starts])
    assert "Clapping" in labels(events), events
    assert "Knock" not in labels(events)


def test_silence_gives_no_class_and_costs_no_inference(yamnet):
    events, classifier = stream(yamnet, sounds.silence(5.0))
    assert events == []
    assert classifier.windows_classified == 0


def test_steady_noise_gives_no_knock_or_clapping(yamnet):
    for level in (0.002, 0.02, 0.1):
        events, classifier = stream(yamnet, sounds.noise(5.0, level=level, seed=2))
        assert not labels(events) & ALARMS, (level, events)
        assert classifier.windows_classified > 0


def test_speech_gives_no_knock_or_clapping(yamnet):
    speech = sounds.speech("Hello, can you hear me? I knocked on the door and clapped my hands twice.")
    audio = np.concatenate([sounds.silence(0.3), speech, sounds.silence(0.5)])
    events, classifier = stream(yamnet, audio)
    assert not labels(events) & ALARMS, events
    assert classifier.windows_classified >= 5


def test_a_label_does_not_fire_again_within_repeat_ms(yamnet):
    knocks, _ = sounds.knocks(3)
    audio, _ = sounds.place(sounds.silence(7.0), knocks, 0.5)
    audio, _ = sounds.place(audio, knocks, 1.5)  # a second run while the first is still fresh
    audio, _ = sounds.place(audio, knocks, 5.0)  # and a third long after
    events, _ = stream(yamnet, audio, config=SoundClassConfig(repeat_ms=3000.0))
    assert len([e for e in events if e.label == "Knock"]) == 2, events


def test_positions_do_not_depend_on_frame_size(yamnet):
    knocks, _ = sounds.knocks(3)
    audio, _ = sounds.place(sounds.silence(3.0), knocks, 0.9)
    small, _ = stream(yamnet, audio, frame=160)
    large, _ = stream(yamnet, audio, frame=16_000)
    assert [(e.label, e.audio_ms, e.score) for e in small] == [(e.label, e.audio_ms, e.score) for e in large]
    assert small


def test_bad_input_is_refused_by_name_and_the_stream_carries_on(yamnet):
    classifier = SoundClassifier(Stamper("s"), model=yamnet)
    classifier.feed(sounds.silence(0.5))
    with pytest.raises(BadInput) as wrong_rate:
        classifier.feed(sounds.silence(0.1), sample_rate=44_100)
    assert wrong_rate.value.field == "sample_rate"
    bad = sounds.silence(0.1)
    bad[10] = np.nan
    with pytest.raises(BadInput, match="NaN"):
        classifier.feed(bad)
    with pytest.raises(BadInput):
        classifier.feed(b"\x00\x01\x02")  # an odd number of PCM16 bytes
    with pytest.raises(BadInput):
        classifier.note_onset(float("inf"))
    assert classifier.clock.ms() == 500.0
    knocks, _ = sounds.knocks(3)
    rest = np.concatenate([knocks, sounds.silence(0.5)])
    events = only(
        SoundClass, classifier.feed(rest[:8000]) + classifier.feed(rest[8000:]) + classifier.flush()
    )
    assert "Knock" in labels(events)


def test_a_label_yamnet_does_not_know_is_refused(yamnet):
    with pytest.raises(KeyError, match="Knocking"):
        SoundClassifier(Stamper("s"), SoundClassConfig(thresholds={"Knocking": 0.5}), model=yamnet)
    with pytest.raises(ValueError, match="threshold"):
        SoundClassifier(Stamper("s"), SoundClassConfig(thresholds={"Knock": 1.5}), model=yamnet)


def test_a_real_knock_that_yamnet_does_not_name_is_named_knock_at_its_onset(yamnet):
    # GCompris's knuckle raps on a door (tests/data/sounds/): YAMNet hears "Glass" or nothing; the burst's
    # spectrum names it, with the onset's id, and the classifier calls none of its raps a clap.
    room = sound_set.room(3.0, -60.0, "noise_street")
    audio, _ = sounds.place(room, sound_set.clip("knock_train3") * 0.4, 0.8)
    detector = OnsetDetector(Stamper("o"))
    onsets = [
        e.audio_ms
        for i in range(0, audio.size, 320)
        for e in only(SoundOnset, detector.feed(audio[i : i + 320]))
    ]
    events, _ = stream(yamnet, audio, onsets_ms=onsets)
    knock = [e for e in events if e.label == "Knock"]
    assert len(onsets) == 3 and len(knock) == 1, events
    assert knock[0].onset_id is not None
    assert knock[0].audio_ms == pytest.approx(onsets[0] + 150.0, abs=1.0)  # the first look after it
    assert not labels(events) & {"Clapping", "Finger snapping"}


def test_a_real_doorbell_is_named_doorbell_and_its_fading_chime_not_music(yamnet):
    # The doorbell of tests/data/sounds/: as its second chime fades YAMNet scores the window "Music" 0.5 and
    # "Doorbell" nothing. The window still holds the doorbell, so nothing else is named for one more window.
    room = sound_set.room(4.0, -60.0, "noise_street")
    audio, _ = sounds.place(room, sound_set.clip("doorbell") * 10 ** (-7 / 20), 0.5)
    held, _ = stream(yamnet, audio)
    unheld, _ = stream(yamnet, audio, config=SoundClassConfig(tail_ms=0.0))
    assert labels(held) == {"Doorbell"}
    assert labels(unheld) == {"Doorbell", "Music"}
