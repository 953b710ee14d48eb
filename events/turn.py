"""End of turn: the user has finished speaking, decided from the silence after their speech.

A turn opens with the first ``SpeechStarted`` after the previous turn ended and ends when the silence after
its last ``SpeechStopped`` has lasted ``silence_ms``, or only ``punctuated_silence_ms`` when the final
transcript of its last speech segment ends like a finished sentence (``.``, ``?`` or ``!``). Speech that
resumes before then keeps the turn open. ``EndOfTurn`` carries where the speech ended, how much silence
decided it and the final transcripts of the turn joined together (None when there were none).

Transcripts come from a worker and may arrive after the silence has begun: one that makes the turn due
ends it at once. ``transcript_wait_ms`` lets the detector wait that much longer for the last segment's
transcript when one is expected (set it when a transcriber runs). Silence is counted on the audio clock
(samples fed), never on the wall clock, so the same stream always gives the same turns.
"""

from __future__ import annotations

import time

import msgspec
import numpy as np

from events.audio import SAMPLE_RATE
from events.stamp import Stamper
from events.vocabulary import EndOfTurn, Event, SpeechStarted, SpeechStopped, Transcript

SENTENCE_END = (".", "?", "!")


class TurnConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How much silence ends a turn."""

    silence_ms: float = 700.0
    """Silence after speech that ends the turn."""
    punctuated_silence_ms: float = 0.0
    """Silence that ends the turn when the last segment's final transcript ends in ``.``, ``?`` or ``!``.
    The transcript comes at the VAD's stop (``min_silence_ms``, 300 ms, after the silence began) or later,
    so at 0 a finished sentence ends the turn at the stop, or as soon as its transcript is there: the cost,
    a mid-sentence pause longer than the VAD's whose first half Whisper punctuates, is in docs/hearing.md."""
    transcript_wait_ms: float = 0.0
    """Extra silence to wait for the last segment's final transcript before ending the turn without it."""

    def __post_init__(self) -> None:
        for name in ("silence_ms", "punctuated_silence_ms", "transcript_wait_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative, got {getattr(self, name)}")


class TurnDetector:
    """Ends turns: ``observe`` the speech and transcript events, ``feed`` the audio, ``poll`` the clock.

    ``feed`` only moves the clock; ``poll`` returns ``EndOfTurn`` once the silence has reached its limit.
    Splitting the two lets the ears give the detector a frame's speech events before it looks at the clock.
    The event reports the limit itself, wherever in a frame it was crossed, so the result does not depend
    on how the stream was split into frames.
    """

    def __init__(self, stamp: Stamper, config: TurnConfig | None = None) -> None:
        self.config = config if config is not None else TurnConfig()
        self._stamp = stamp
        self._samples = 0
        self._open = False  # speech was heard since the last end of turn
        self._speaking = False  # between SpeechStarted and SpeechStopped
        self._segment_start = 0.0  # ms: start of the turn's last speech segment
        self._speech_end = 0.0  # ms: end of the turn's last speech segment
        self._ended_at = -1.0  # ms: where the speech of the last ended turn stopped
        self._texts: list[str] = []
        self._covered = False  # the last segment has its final transcript
        self._transcript_ns: int | None = None  # arrival of the turn's last final transcript

    @property
    def now_ms(self) -> float:
        """Position of the audio clock (ms)."""
        return self._samples * 1000.0 / SAMPLE_RATE

    def feed(self, samples: np.ndarray) -> list[Event]:
        """Move the clock over the samples (nothing is decided until ``poll``)."""
        self._samples += samples.size
        return []

    def poll(self) -> list[Event]:
        """``EndOfTurn`` if the silence after the turn's speech has reached its limit."""
        return self._check(exact=True)

    def observe(self, event: Event) -> list[Event]:
        """Take in another listener's event; returns ``EndOfTurn`` if it made the turn due."""
        if isinstance(event, SpeechStarted):
            if not self._open:
                self._open = True
                self._texts = []
                self._transcript_ns = None
            self._speaking = True
            self._segment_start = event.audio_ms
            self._covered = False
        elif isinstance(event, SpeechStopped):
            if self._open:
                self._speaking = False
                self._speech_end = event.audio_ms
        elif isinstance(event, Transcript) and event.final and self._belongs(event):
            text = event.text.strip()
            if text:
                self._texts.append(text)
                self._transcript_ns = event.t_ns
            if event.audio_ms is None or event.audio_ms >= self._segment_start:
                self._covered = True
            return self._check(exact=False)
        return []

    def _belongs(self, transcript: Transcript) -> bool:
        """A transcript belongs to the open turn unless its audio ended with an earlier turn."""
        if not self._open:
            return False
        return transcript.audio_ms is None or transcript.audio_ms > self._ended_at

    def _due_ms(self) -> float:
        cfg = self.config
        if self._covered and self._texts and self._texts[-1].endswith(SENTENCE_END):
            return cfg.punctuated_silence_ms
        return cfg.silence_ms if self._covered else cfg.silence_ms + cfg.transcript_wait_ms

    def _check(self, exact: bool) -> list[Event]:
        if not self._open or self._speaking:
            return []
        due = self._due_ms()
        silence = self.now_ms - self._speech_end
        if silence < due:
            return []
        # From the clock, report the threshold (where it was crossed inside the frame, whatever the frame);
        # from a late transcript, the silence actually heard.
        return [self._end(due if exact else silence)]

    def _end(self, silence: float) -> Event:
        text = " ".join(self._texts) or None
        now_ns = time.monotonic_ns()
        # The audio up to ``now_ms`` has been heard by now: the speech ended that much audio ago.
        speech_end_ns = now_ns - round((self.now_ms - self._speech_end) * 1e6)
        event = self._stamp(
            EndOfTurn,
            t_ns=now_ns,
            audio_ms=self._speech_end,
            silence_ms=silence,
            transcript=text,
            speech_end_ns=speech_end_ns,
            transcript_ns=self._transcript_ns if text else None,
        )
        self._open = False
        self._ended_at = self._speech_end
        self._texts = []
        self._covered = False
        return event

    def flush(self) -> list[Event]:
        """End the stream: an open turn whose speech has stopped ends now, with the silence heard so far."""
        if self._open and not self._speaking:
            return [self._end(self.now_ms - self._speech_end)]
        return []
