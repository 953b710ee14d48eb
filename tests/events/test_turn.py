"""End of turn on real speech through the ears, and with transcripts as a transcriber sends them."""

from __future__ import annotations

from typing import TypeVar

import numpy as np
import pytest

from events.ears import Ears, EarsConfig
from events.stamp import Stamper
from events.turn import TurnConfig, TurnDetector
from events.vocabulary import EndOfTurn, Event, SpeechStarted, SpeechStopped, Transcript
from tests import sounds

E = TypeVar("E", bound=Event)

FRAME = 320  # 20 ms, as a client sends them


@pytest.fixture(scope="module")
def speech() -> np.ndarray:
    return sounds.speech("Please tell me a story about a dragon.", sampling_noise=False)


def hear(audio: np.ndarray, config: TurnConfig | None = None) -> tuple[Ears, list[tuple[float, Event]]]:
    """Run the ears over ``audio`` in 20 ms frames; returns each event with the audio time it came out."""
    ears = Ears(Stamper("t"), EarsConfig(levels=None, turn=config or TurnConfig()))
    out = []
    for i in range(0, audio.size, FRAME):
        out += [((i + FRAME) * 1000 / sounds.RATE, e) for e in ears.feed(audio[i : i + FRAME])]
    return ears, out


def of(kind: type[E], heard: list[tuple[float, Event]]) -> list[tuple[float, E]]:
    return [(t, e) for t, e in heard if isinstance(e, kind)]


def advance(turn: TurnDetector, seconds: float) -> list[Event]:
    """Move the detector's clock on by ``seconds`` of audio and ask what became due."""
    turn.feed(sounds.silence(seconds))
    return turn.poll()


def transcript(stamp: Stamper, text: str, start_ms: float, end_ms: float) -> Transcript:
    return stamp(Transcript, text=text, final=True, start_ms=start_ms, audio_ms=end_ms)


def test_the_turn_ends_after_700_ms_of_silence_following_speech(speech):
    audio = np.concatenate([sounds.silence(0.5), speech, sounds.silence(1.5)])
    _, heard = hear(audio)
    [(_, stopped)] = of(SpeechStopped, heard)
    [(when, turn)] = of(EndOfTurn, heard)
    assert turn.audio_ms == stopped.audio_ms
    assert turn.silence_ms == 700.0
    assert turn.transcript is None
    assert stopped.audio_ms + 700 <= when < stopped.audio_ms + 700 + 20


def test_a_pause_shorter_than_the_turn_silence_keeps_one_turn(speech):
    audio = np.concatenate([sounds.silence(0.5), speech, sounds.silence(0.5), speech, sounds.silence(1.5)])
    _, heard = hear(audio)
    assert len(of(SpeechStopped, heard)) == 2
    [(_, turn)] = of(EndOfTurn, heard)
    assert turn.audio_ms == of(SpeechStopped, heard)[-1][1].audio_ms


def test_a_long_pause_ends_one_turn_and_speech_opens_the_next(speech):
    audio = np.concatenate([sounds.silence(0.5), speech, sounds.silence(1.2), speech, sounds.silence(1.5)])
    _, heard = hear(audio)
    assert [type(e) for _, e in heard if isinstance(e, SpeechStarted | SpeechStopped | EndOfTurn)] == [
        SpeechStarted,
        SpeechStopped,
        EndOfTurn,
    ] * 2


def test_knocks_alone_never_end_a_turn():
    audio = np.concatenate([sounds.silence(0.3), sounds.knocks(4)[0], sounds.silence(1.5)])
    _, heard = hear(audio)
    assert of(EndOfTurn, heard) == []


def test_a_final_transcript_ending_a_sentence_shortens_the_silence_and_is_carried(speech):
    audio = np.concatenate([sounds.silence(0.5), speech, sounds.silence(1.5)])
    stamp = Stamper("t")
    # SpeechStopped itself comes out min_silence_ms (300) after the speech: the short silence must be longer.
    ears = Ears(stamp, EarsConfig(levels=None, turn=TurnConfig(silence_ms=1000, punctuated_silence_ms=600)))
    text = "Please tell me a story about a dragon."
    heard = []
    for i in range(0, audio.size, FRAME):
        now = (i + FRAME) * 1000 / sounds.RATE
        for event in ears.feed(audio[i : i + FRAME]):
            heard.append((now, event))
            if isinstance(event, SpeechStopped):  # the transcriber answers at once
                heard += [(now, e) for e in ears.observe(transcript(stamp, text, 500.0, event.audio_ms))]
    [(_, stopped)] = of(SpeechStopped, heard)
    [(when, turn)] = of(EndOfTurn, heard)
    assert turn.silence_ms == 600.0 and turn.transcript == text
    assert stopped.audio_ms + 600 <= when < stopped.audio_ms + 600 + 20


def test_a_transcript_arriving_after_the_short_silence_ends_the_turn_at_once():
    stamp = Stamper("t")
    turn = TurnDetector(stamp, TurnConfig(silence_ms=700, punctuated_silence_ms=300))
    turn.observe(stamp(SpeechStarted, audio_ms=0.0))
    advance(turn, 1.0)
    turn.observe(stamp(SpeechStopped, audio_ms=1000.0, duration_ms=1000.0))
    assert advance(turn, 0.5) == []
    [event] = turn.observe(transcript(stamp, "Is it raining?", 0.0, 1000.0))
    assert isinstance(event, EndOfTurn)
    assert event.audio_ms == 1000.0 and event.silence_ms == 500.0 and event.transcript == "Is it raining?"


def test_without_an_ending_mark_the_full_silence_is_needed():
    stamp = Stamper("t")
    turn = TurnDetector(stamp, TurnConfig(silence_ms=700, punctuated_silence_ms=300))
    turn.observe(stamp(SpeechStarted, audio_ms=0.0))
    advance(turn, 1.0)
    turn.observe(stamp(SpeechStopped, audio_ms=1000.0, duration_ms=1000.0))
    assert turn.observe(transcript(stamp, "so I was thinking", 0.0, 1000.0)) == []
    assert advance(turn, 0.6) == []
    [event] = advance(turn, 0.2)
    assert isinstance(event, EndOfTurn)
    assert event.silence_ms == 700.0 and event.transcript == "so I was thinking"


def test_transcript_wait_holds_the_turn_for_a_late_transcript():
    stamp = Stamper("t")
    turn = TurnDetector(stamp, TurnConfig(silence_ms=700, transcript_wait_ms=500))
    turn.observe(stamp(SpeechStarted, audio_ms=0.0))
    advance(turn, 1.0)
    turn.observe(stamp(SpeechStopped, audio_ms=1000.0, duration_ms=1000.0))
    assert advance(turn, 0.9) == []
    [event] = turn.observe(transcript(stamp, "tell me more.", 0.0, 1000.0))
    assert isinstance(event, EndOfTurn)
    assert event.transcript == "tell me more." and event.silence_ms == pytest.approx(900.0)


def test_a_late_transcript_of_an_ended_turn_is_not_carried_into_the_next():
    stamp = Stamper("t")
    turn = TurnDetector(stamp, TurnConfig(silence_ms=700))
    turn.observe(stamp(SpeechStarted, audio_ms=0.0))
    advance(turn, 1.0)
    turn.observe(stamp(SpeechStopped, audio_ms=1000.0, duration_ms=1000.0))
    [first] = advance(turn, 1.0)
    assert isinstance(first, EndOfTurn)
    assert first.transcript is None
    turn.observe(stamp(SpeechStarted, audio_ms=2000.0))
    turn.observe(transcript(stamp, "old words", 0.0, 1000.0))
    advance(turn, 1.0)
    turn.observe(stamp(SpeechStopped, audio_ms=3000.0, duration_ms=1000.0))
    turn.observe(transcript(stamp, "new words", 2000.0, 3000.0))
    [second] = advance(turn, 1.0)
    assert isinstance(second, EndOfTurn)
    assert second.transcript == "new words"


def test_flush_ends_an_open_turn_with_the_silence_heard_so_far(speech):
    audio = np.concatenate([sounds.silence(0.5), speech, sounds.silence(0.4)])
    ears, heard = hear(audio)
    [turn] = [e for e in ears.flush() if isinstance(e, EndOfTurn)]
    [(_, stopped)] = of(SpeechStopped, heard)
    assert turn.audio_ms == stopped.audio_ms
    assert turn.silence_ms == pytest.approx(audio.size * 1000 / sounds.RATE - stopped.audio_ms)
