"""The heavy encoders as shared Ray actors: Whisper (transcripts), YAMNet (sound classes) and Piper (the
character's voice), loaded once per actor for every session of every front end of the cluster (one actor
per ``onstage_encoders`` resource the nodes declare, or one; front ends spread their calls over them).

    encoders = SharedEncoders.options(name="encoders-0", ...).remote(TranscriberConfig(), SoundClassConfig())
    text = await encoders.transcribe.remote(samples)              # the words of a checked segment
    scores = await encoders.scores_of_patch.remote(patch)        # YAMNet's 521 probabilities
    utterance = await encoders.speak_first.remote(text, 24000, False)   # at the video's priority
    utterance = await encoders.speak.remote(text, 24000, False)         # below it

Each kind runs on a thread of its own (its concurrency group), so a queue of transcriptions never holds up
a sound's classes or a voice. As in a front end's own pools (``events.priority``), transcription and most
speech run niced, below the generators that may share the node; a first sentence (``speak_first``: a
chunk's mouth waits for it) and the sound classes run at the usual priority. Whisper is loaded and run on
the transcriber's own thread, as in a front end, so that the threads CTranslate2 starts inherit its
priority.
``remote_encoders`` has the front end's side: a ``Transcriber``, a ``YamNet`` and a ``Voice`` that call
this actor.
"""

from __future__ import annotations

import threading
from collections import Counter

import numpy as np
import ray

from events.priority import BACKGROUND_NICENESS, lower_this_thread
from events.sound_classes import SoundClassConfig
from events.transcriber import Transcriber, TranscriberConfig
from events.yamnet import YamNet
from server.voice import Utterance, Voice


def name_of(i: int) -> str:
    """Encoders actor ``i``'s name in the ``onstage`` namespace: every front end finds the actors by it."""
    return f"encoders-{i}"


@ray.remote(  # type: ignore[call-overload]
    concurrency_groups={"transcribe": 1, "sounds": 1, "voice": 1, "voice_first": 1, "control": 1}
)
class SharedEncoders:
    """Whisper, YAMNet and Piper, loaded once; each kind of call on its own thread."""

    def __init__(self, transcripts: TranscriberConfig, sounds: SoundClassConfig) -> None:
        self._transcriber = Transcriber(transcripts)
        self._yamnet = YamNet(threads=sounds.threads)
        self._voices: dict[tuple[int, bool], Voice] = {}
        self._lock = threading.Lock()
        self._niced: set[int] = set()
        self._served: Counter[str] = Counter()

    @ray.method(concurrency_group="control")
    def served(self) -> dict[str, int]:
        """Calls served so far, by kind (transcribe, sounds, voice)."""
        with self._lock:
            return dict(self._served)

    @ray.method(concurrency_group="control")
    def where(self) -> str:
        """The Ray node this actor runs on."""
        return ray.get_runtime_context().get_node_id()

    def _count(self, kind: str) -> None:
        with self._lock:
            self._served[kind] += 1

    @ray.method(concurrency_group="sounds")
    def labels(self) -> list[str]:
        """YAMNet's class names, by index."""
        return self._yamnet.labels

    @ray.method(concurrency_group="sounds")
    def scores_of_patch(self, patch: np.ndarray) -> np.ndarray:
        """YAMNet's probabilities (521,) for one (96, 64) log-mel patch."""
        self._count("sounds")
        return self._yamnet.scores_of_patch(patch)

    @ray.method(concurrency_group="transcribe")
    def load(self) -> None:
        """Load Whisper (on the transcriber's own niced thread) and Piper now rather than at first use."""
        self._transcriber.load()
        Voice().load()

    @ray.method(concurrency_group="transcribe")
    def transcribe(self, audio: np.ndarray) -> str:
        """The words of ``audio`` (checked by the front end: float32 mono 16 kHz), transcribed on the
        transcriber's own niced thread, as in a front end."""
        self._count("transcribe")
        return self._transcriber.submit(audio).result().text

    @ray.method(concurrency_group="voice")
    def speak(self, text: str, rate: int, sampling_noise: bool) -> Utterance:
        """``text`` spoken at ``rate`` Hz, below the video's priority (``Voice.synthesize``)."""
        self._nice(BACKGROUND_NICENESS)
        self._count("voice")
        return self._voice(rate, sampling_noise).synthesize(text)

    @ray.method(concurrency_group="voice_first")
    def speak_first(self, text: str, rate: int, sampling_noise: bool) -> Utterance:
        """``speak`` at the video's own priority: a first sentence, which a chunk's mouth waits for."""
        self._count("voice")
        return self._voice(rate, sampling_noise).synthesize(text)

    def _voice(self, rate: int, sampling_noise: bool) -> Voice:
        with self._lock:  # one Voice (one lock around Piper's one session) for both voice threads
            key = (rate, sampling_noise)
            if key not in self._voices:
                self._voices[key] = Voice(rate, sampling_noise)
            return self._voices[key]

    def _nice(self, niceness: int) -> None:
        """Lower the calling thread's priority, once (a group's thread serves every call of that group)."""
        tid = threading.get_native_id()
        if tid not in self._niced:
            self._niced.add(tid)
            lower_this_thread(niceness)
