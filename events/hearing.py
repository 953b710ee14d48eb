"""The heavy listeners as ears listeners: sound classes (YAMNet) and transcripts (Whisper).

Their models are loaded once per process by ``Hearing`` and shared by every session; ``listeners``
makes one session's listeners around them. The sound classifier looks again after each onset the
energy detector reports; the transcriber writes down each speech segment when the voice detector closes
it, in its own thread (``Threaded``), so a 0.1-0.5 s transcription never holds up the other listeners.
"""

from __future__ import annotations

import numpy as np

from events.ears import Threaded
from events.listener import Listener
from events.sound_classes import SoundClassConfig, SoundClassifier
from events.stamp import Stamper
from events.transcriber import SegmentRecorder, Transcriber, TranscriberConfig
from events.vocabulary import Event, SoundOnset, SpeechStopped
from events.yamnet import YamNet


class OnsetLooks:
    """A ``SoundClassifier`` that also looks after every ``SoundOnset`` the other listeners report."""

    def __init__(self, classifier: SoundClassifier) -> None:
        self.classifier = classifier

    def feed(self, samples: np.ndarray) -> list[Event]:
        return list(self.classifier.feed(samples))

    def observe(self, event: Event) -> list[Event]:
        return list(self.classifier.note_onset(event)) if isinstance(event, SoundOnset) else []

    def flush(self) -> list[Event]:
        return list(self.classifier.flush())


class SegmentTranscriber:
    """Keeps the recent audio and turns each closed speech segment into a final ``Transcript``."""

    def __init__(self, transcriber: Transcriber, stamper: Stamper) -> None:
        self.transcriber = transcriber
        self.stamper = stamper
        self.recorder = SegmentRecorder()

    def feed(self, samples: np.ndarray) -> list[Event]:
        return self.recorder.feed(samples)

    def observe(self, event: Event) -> list[Event]:
        if not isinstance(event, SpeechStopped):
            return []
        segment = self.recorder.on_event(event)
        if segment is None or segment.samples.size == 0:
            return []
        transcript = self.transcriber.transcript(segment, self.stamper)
        return [] if transcript is None else [transcript]

    def flush(self) -> list[Event]:
        return []


class Hearing:
    """YAMNet and Whisper, loaded once; ``None`` configs leave a listener out."""

    def __init__(
        self,
        sounds: SoundClassConfig | None = SoundClassConfig(),  # noqa: B008 (an immutable Struct)
        transcripts: TranscriberConfig | None = TranscriberConfig(),  # noqa: B008
    ) -> None:
        self.sounds = sounds
        self.yamnet = YamNet(threads=sounds.threads) if sounds is not None else None
        self.transcriber = Transcriber(transcripts) if transcripts is not None else None

    def listeners(self, stamper: Stamper, threaded: bool = True) -> list[Listener]:
        """One session's heavy listeners; ``threaded=False`` runs the transcriber inline (files, tests)."""
        out: list[Listener] = []
        if self.yamnet is not None:
            out.append(OnsetLooks(SoundClassifier(stamper, self.sounds, model=self.yamnet)))
        if self.transcriber is not None:
            transcriber = SegmentTranscriber(self.transcriber, stamper)
            out.append(Threaded(transcriber) if threaded else transcriber)
        return out

    def load(self) -> None:
        """Load Whisper now rather than at the first speech segment (which would then wait for it)."""
        if self.transcriber is not None:
            self.transcriber.load()

    def close(self) -> None:
        if self.transcriber is not None:
            self.transcriber.close()
