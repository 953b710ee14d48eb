"""What ending a punctuated turn at the VAD's stop costs: turns cut inside an utterance, at its real pauses.

Real recordings (tests/data/sounds: Asterisk's prompts, game calls) and Piper sentences with commas, each
heard alone by the real ears and real Whisper tiny.en; the same events drive three turn detectors, so the
one difference between them is when a punctuated turn may end. The counts are printed (docs/hearing.md
quotes them); the test holds the mechanism: only a transcript that ends a sentence cuts a turn before
``silence_ms``, and an earlier end never cuts fewer.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from events.ears import Ears, EarsConfig, read_wav
from events.hearing import SegmentTranscriber
from events.stamp import Stamper
from events.transcriber import Transcriber, TranscriberConfig, WhisperConfig
from events.turn import SENTENCE_END, TurnConfig, TurnDetector
from events.vocabulary import EndOfTurn, SpeechStopped
from tests import sounds

FRAME = 320
DATA = Path(__file__).resolve().parent.parent / "data" / "sounds"
REAL = (
    "speech_en_US_f_Allison_0",
    "speech_en_US_f_Allison_1",
    "speech_kajongg_female1",
    "speech_hedgewars_hello",
)
PIPER = (
    "Well, I was thinking, maybe we could go to the park, and then have some lunch.",
    "When I was young, my grandmother, who lived by the sea, told me stories every night.",
    "If you want, we can start with the first chapter, or skip straight to the end.",
)
ENDS = {"at the stop (0 ms)": 0.0, "350 ms (before)": 350.0, "no sentence rule": 700.0}
EARLY_MS = 150.0  # a turn that ends more than this before the utterance's last sample was cut inside it


@pytest.fixture(scope="module")
def whisper() -> Iterator[Transcriber]:
    transcriber = Transcriber(TranscriberConfig(whisper=WhisperConfig(cpu_threads=2)))
    transcriber.load()
    yield transcriber
    transcriber.close()


def utterances() -> list[tuple[str, np.ndarray]]:
    real = [(name, sounds.trim(read_wav(DATA / f"{name}.wav"))) for name in REAL]
    made = [(text[:24], sounds.speech(text, sampling_noise=False)) for text in PIPER]
    return real + made


def turns(audio: np.ndarray, whisper: Transcriber) -> tuple[int, dict[str, list[EndOfTurn]]]:
    """The VAD stops inside ``audio`` and the turns each detector ends, for ``audio`` then 1.5 s of room tone."""
    stamper = Stamper("t")
    ears = Ears(
        stamper, EarsConfig(levels=None, onset=None, turn=None), [SegmentTranscriber(whisper, stamper)]
    )
    detectors = {
        name: TurnDetector(stamper, TurnConfig(transcript_wait_ms=800.0, punctuated_silence_ms=ms))
        for name, ms in ENDS.items()
    }
    ended: dict[str, list[EndOfTurn]] = {name: [] for name in ENDS}
    stops = 0
    heard = np.concatenate([sounds.silence(0.3), audio, sounds.silence(1.5)])
    heard += sounds.noise(heard.size / sounds.RATE, 0.002, seed=5)
    end_ms = (0.3 * sounds.RATE + audio.size) * 1000 / sounds.RATE
    for start in range(0, heard.size, FRAME):
        frame = heard[start : start + FRAME]
        events = ears.feed(frame)
        stops += sum(isinstance(e, SpeechStopped) and e.audio_ms < end_ms - EARLY_MS for e in events)
        for name, detector in detectors.items():
            detector.feed(frame)
            made = [x for e in events for x in detector.observe(e)] + detector.poll()
            ended[name] += [e for e in made if isinstance(e, EndOfTurn)]
    ears.close()
    return stops, {name: [e for e in got if e.audio_ms < end_ms - EARLY_MS] for name, got in ended.items()}


def test_ending_punctuated_turns_at_the_stop_cuts_only_at_punctuated_pauses(whisper):
    pauses = 0
    early = {name: 0 for name in ENDS}
    for name, audio in utterances():
        stops, cut = turns(audio, whisper)
        pauses += stops
        print(f"{name}: {stops} stops inside, cut early: { ({k: len(v) for k, v in cut.items()}) }")
        for end in cut["at the stop (0 ms)"]:
            # Cut before silence_ms only on a transcript that ends a sentence.
            if end.silence_ms < TurnConfig().silence_ms:
                assert end.transcript is not None and end.transcript.endswith(SENTENCE_END), end
        for key, got in cut.items():
            early[key] += len(got)
    print(f"{pauses} pauses long enough to stop the VAD inside an utterance; turns cut early: {early}")
    assert pauses > 0, "the set must hold pauses that stop the VAD inside an utterance"
    assert early["at the stop (0 ms)"] >= early["350 ms (before)"] >= early["no sentence rule"]
