"""The heavy listeners as ears listeners: sound classes (YAMNet) and transcripts (Whisper).

Their models are loaded once per process by ``Hearing`` and shared by every session; ``listeners``
makes one session's listeners around them. The sound classifier looks again after each onset the
energy detector reports; the transcriber writes down each speech segment when the voice detector closes
it, in its own thread (``Threaded``), so a 0.1-0.5 s transcription never holds up the other listeners,
starting as soon as the segment's silence begins (``SegmentTranscriber``).
"""

from __future__ import annotations

from concurrent.futures import Future

import numpy as np

from events.ears import Threaded
from events.listener import Listener
from events.sound_classes import SoundClassConfig, SoundClassifier
from events.stamp import Stamper
from events.transcriber import SegmentRecorder, Transcriber, TranscriberConfig, TranscriptResult
from events.vocabulary import Event, SilenceBegan, SoundOnset, SpeechStopped
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
    """Keeps the recent audio and turns each closed speech segment into a final ``Transcript``.

    With ``speculate``, Whisper starts on a segment as soon as the VAD hears its silence begin
    (``SilenceBegan``), on the transcriber's worker thread, while this listener goes on hearing. The stop
    that confirms that silence carries the same ``heard_ms``, so its transcript is made of the same samples
    and the speculative result is taken as it is; a stop that does not match it (speech resumed, then
    paused again) drops it, unstarted work cancelled, and transcribes its own. Either way the transcript
    is published at the stop, never before: the text and bounds are what ``speculate=False`` gives.
    """

    def __init__(self, transcriber: Transcriber, stamper: Stamper, speculate: bool = True) -> None:
        self.transcriber = transcriber
        self.stamper = stamper
        self.speculate = speculate
        self.recorder = SegmentRecorder()
        self.speculations = 0
        """Speculative transcriptions started."""
        self.used = 0
        """Speculative transcriptions that a stop took as its transcript."""
        self.lead_ms: float | None = None
        """How much audio before its stop the last speculation a stop took had started."""
        self._pending: tuple[tuple[int, int], Future[TranscriptResult]] | None = None
        self._started_at = 0  # recorder position when the pending speculation started

    def feed(self, samples: np.ndarray) -> list[Event]:
        return self.recorder.feed(samples)

    def observe(self, event: Event) -> list[Event]:
        if isinstance(event, SilenceBegan) and self.speculate:
            self._drop()
            span = self.recorder.span(event.start_ms, event.heard_ms)
            if span[1] > span[0]:
                self._pending = (span, self.transcriber.submit(self.recorder.read(span)))
                self._started_at = self.recorder.clock.samples
                self.speculations += 1
            return []
        if not isinstance(event, SpeechStopped):
            return []
        pending, self._pending = self._pending, None
        segment = self.recorder.on_event(event)
        assert segment is not None
        start_ms = event.audio_ms - event.duration_ms
        if (
            pending is not None
            and event.heard_ms is not None
            and pending[0] == self.recorder.span(start_ms, event.heard_ms)
        ):
            result = pending[1].result()
            self.used += 1
            self.lead_ms = self.recorder.clock.ms(self.recorder.clock.samples - self._started_at)
        else:
            if pending is not None:
                pending[1].cancel()
            if segment.samples.size == 0:
                return []
            result = self.transcriber.submit(segment.samples).result()
        transcript = self.transcriber.event(segment, result, self.stamper)
        return [] if transcript is None else [transcript]

    def _drop(self) -> None:
        if self._pending is not None:
            self._pending[1].cancel()
            self._pending = None

    def flush(self) -> list[Event]:
        self._drop()
        return []


class Hearing:
    """YAMNet and Whisper, loaded once; ``None`` configs leave a listener out. ``yamnet`` and ``transcriber``
    given: those (served elsewhere, say) rather than models loaded in this process."""

    def __init__(
        self,
        sounds: SoundClassConfig | None = SoundClassConfig(),  # noqa: B008 (an immutable Struct)
        transcripts: TranscriberConfig | None = TranscriberConfig(),  # noqa: B008
        speculate: bool = True,
        *,
        yamnet: YamNet | None = None,
        transcriber: Transcriber | None = None,
    ) -> None:
        self.sounds = sounds
        self.speculate = speculate
        """Whether transcription starts when a segment's silence begins (``SegmentTranscriber``)."""
        self.yamnet = (yamnet or YamNet(threads=sounds.threads)) if sounds is not None else None
        self.transcriber = (transcriber or Transcriber(transcripts)) if transcripts is not None else None

    def listeners(self, stamper: Stamper, threaded: bool = True) -> list[Listener]:
        """One session's heavy listeners; ``threaded=False`` runs the transcriber inline (files, tests)."""
        out: list[Listener] = []
        if self.yamnet is not None:
            out.append(OnsetLooks(SoundClassifier(stamper, self.sounds, model=self.yamnet)))
        if self.transcriber is not None:
            transcriber = SegmentTranscriber(self.transcriber, stamper, self.speculate)
            out.append(Threaded(transcriber) if threaded else transcriber)
        return out

    def load(self) -> None:
        """Load Whisper now rather than at the first speech segment (which would then wait for it)."""
        if self.transcriber is not None:
            self.transcriber.load()

    def close(self) -> None:
        if self.transcriber is not None:
            self.transcriber.close()
