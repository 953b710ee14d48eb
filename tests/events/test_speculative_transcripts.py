"""Speculative transcription: Whisper starts when a segment's silence begins, and what is published is what
the transcriber gives without speculating (real Whisper tiny.en, real Piper speech, the real ears)."""

from __future__ import annotations

import numpy as np
import pytest

from events.ears import Ears, EarsConfig
from events.hearing import SegmentTranscriber
from events.stamp import Stamper
from events.transcriber import Transcriber
from events.vad import VadConfig
from events.vocabulary import Event, Hint, SpeechStopped, Transcript
from tests import sounds

FRAME = 320  # 20 ms, as a client sends


@pytest.fixture(scope="module")
def utterances() -> np.ndarray:
    """Two turns in room tone: the first with a pause inside it too short to stop the segment (so a
    speculation is started on its first half and must be dropped), the second one sentence."""
    first = sounds.speech("I would like to order two coffees", sampling_noise=False)
    rest = sounds.speech("and a slice of chocolate cake.", sampling_noise=False)
    second = sounds.speech("What is your name?", sampling_noise=False)
    audio = np.concatenate(
        [
            sounds.silence(0.5),
            first,
            sounds.silence(0.22),  # under the VAD's min_silence_ms (300): one segment
            rest,
            sounds.silence(1.2),
            second,
            sounds.silence(1.2),
        ]
    )
    return audio + sounds.noise(audio.size / sounds.RATE, 0.002, seed=3)


def hear(audio: np.ndarray, whisper: Transcriber, speculate: bool) -> tuple[list[Event], SegmentTranscriber]:
    stamper = Stamper("s")
    listener = SegmentTranscriber(whisper, stamper, speculate=speculate)
    ears = Ears(stamper, EarsConfig(levels=None, onset=None), [listener])
    heard: list[Event] = []
    for start in range(0, audio.size, FRAME):
        heard.extend(ears.feed(audio[start : start + FRAME]))
    heard.extend(ears.flush())
    ears.close()
    return heard, listener


def transcripts(events: list[Event]) -> list[tuple[str, float | None, float | None]]:
    return [(e.text, e.start_ms, e.audio_ms) for e in events if isinstance(e, Transcript)]


def test_speculating_publishes_the_same_transcripts_started_a_silence_earlier(whisper, utterances):
    plain, plain_listener = hear(utterances, whisper, speculate=False)
    fast, listener = hear(utterances, whisper, speculate=True)
    stops = [e for e in fast if isinstance(e, SpeechStopped)]
    assert len(stops) == 2, stops
    # Same text, same bounds, whether Whisper started at the silence's first window or at the stop.
    assert transcripts(fast) == transcripts(plain)
    texts = [text for text, _, _ in transcripts(fast)]
    # The first is the whole turn, never the half that the dropped speculation heard.
    assert len(texts) == 2 and "coffees" in texts[0].lower() and "cake" in texts[0].lower(), texts
    assert "name" in texts[1].lower(), texts
    assert plain_listener.speculations == 0
    # The pause inside the first turn started a speculation that the stop did not take; each stop took one.
    assert listener.used == 2
    assert listener.speculations > listener.used
    # The one taken started as the silence began, min_silence_ms (less one 32 ms window) before the stop.
    assert listener.lead_ms is not None
    assert listener.lead_ms >= VadConfig().min_silence_ms - 32.0
    # The hints stay among the listeners: nothing the ears return is one.
    assert not any(isinstance(e, Hint) for e in fast)
