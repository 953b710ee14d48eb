"""The front end's side of the shared encoders (``encoders``): a ``Transcriber``, a ``YamNet`` and a
``Voice`` whose models run in the cluster's ``SharedEncoders`` actors (one per ``onstage_encoders``
resource the nodes declare, or one). Each call goes to the actor with the fewest of this front end's calls
of its kind in flight (``Spread``, one per kind, as each kind has its own thread in an actor; ties in
turn), so a cluster's encoders grow with its nodes.

    voice, hearing = shared_voice_and_hearing(TranscriberConfig(), speculate=True)   # after RaySlots.connect
    factory = SessionFactory(None, voice, hearing, workers=slots)

Everything else stays as in a front end of its own: segments are cut and checked here and still queue on
this front end's transcriber thread (which waits for the actor), log-mel patches are made here and only
their classes are asked for, and speech is asked for by sentence as the speech player goes. Blocking calls
(``ray.get``) are made only where the in-process models would block: on the transcriber's and the ears'
threads, and in ``Voice.synthesize``, which runs off the event loop.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from typing import Any, cast

import numpy as np
import ray
from ray.actor import ActorHandle

from events.hearing import Hearing
from events.sound_classes import SoundClassConfig
from events.transcriber import Transcriber, TranscriberConfig
from events.yamnet import YamNet
from server.cluster.encoders import SharedEncoders, name_of
from server.cluster.remote import NAMESPACE, ClusterError
from server.cluster.settings import ENCODERS_RESOURCE
from server.voice import OUTPUT_RATE, Utterance, Voice


class Spread:
    """The cluster's encoders actors for one kind of call, each call to the one with the fewest of this
    front end's calls of that kind in flight (ties in turn). Thread-safe (the ears' threads share one)."""

    def __init__(self, actors: Sequence[ActorHandle]) -> None:
        self.actors = list(actors)
        self._in_flight = [0] * len(self.actors)
        self._next = 0
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def one(self) -> Iterator[ActorHandle]:
        """An actor for one call, counted as busy with it until the block ends."""
        n = len(self.actors)
        with self._lock:
            i = min(range(n), key=lambda j: (self._in_flight[j], (j - self._next) % n))
            self._in_flight[i] += 1
            self._next = (i + 1) % n
        try:
            yield self.actors[i]
        finally:
            with self._lock:
                self._in_flight[i] -= 1


def shared_encoders(
    transcripts: TranscriberConfig, sounds: SoundClassConfig, timeout_s: float
) -> list[ActorHandle]:
    """The cluster's encoders actors, one per ``onstage_encoders`` resource (one, placed by Ray, where the
    cluster declares none), made by the first front end that asks (detached, so they outlive it), with
    their models loaded. Ray must be joined already (``RaySlots.connect``). Blocks: call it in a thread."""
    declared = int(ray.cluster_resources().get(ENCODERS_RESOURCE, 0))
    actors = [
        SharedEncoders.options(  # type: ignore[attr-defined]
            name=name_of(i),
            namespace=NAMESPACE,
            get_if_exists=True,
            lifetime="detached",
            max_restarts=-1,  # a killed encoder comes back (the calls in flight fail)
            resources={ENCODERS_RESOURCE: 1} if declared else {},
        ).remote(transcripts, sounds)
        for i in range(max(declared, 1))
    ]
    try:
        ray.get([actor.load.remote() for actor in actors], timeout=timeout_s)
    except ray.exceptions.GetTimeoutError:
        raise ClusterError(f"the {len(actors)} shared encoders were not up within {timeout_s:g} s") from None
    return actors


def shared_voice_and_hearing(
    transcripts: TranscriberConfig,
    speculate: bool,
    sounds: SoundClassConfig = SoundClassConfig(),  # noqa: B008 (an immutable Struct)
    timeout_s: float = 180.0,
) -> tuple[Voice, Hearing]:
    """The voice and the hearing of a front end whose encoders are the cluster's (a transcriber with an
    endpoint of its own keeps it: nothing to share). Blocks: call it in a thread."""
    actors = shared_encoders(transcripts, sounds, timeout_s)
    transcriber = RemoteTranscriber(Spread(actors), transcripts) if transcripts.endpoint is None else None
    yamnet = RemoteYamNet(Spread(actors))
    return RemoteVoice(Spread(actors)), Hearing(
        sounds, transcripts, speculate, yamnet=yamnet, transcriber=transcriber
    )


class RemoteTranscriber(Transcriber):
    """A ``Transcriber`` whose words come from the shared encoders' Whisper."""

    def __init__(self, encoders: Spread, config: TranscriberConfig) -> None:
        super().__init__(config)
        self._encoders = encoders

    def _load(self) -> None:
        return None  # loaded in the actor

    def _text(self, audio: np.ndarray) -> str:
        with self._encoders.one() as actor:
            return cast(str, ray.get(actor.transcribe.remote(audio)))


class RemoteYamNet(YamNet):
    """YAMNet in the shared encoders: patches are made here (``scores``), their classes there."""

    def __init__(self, encoders: Spread) -> None:
        # Not YamNet's own: nothing is loaded here.
        self._encoders = encoders
        self.labels = ray.get(encoders.actors[0].labels.remote())

    def scores_of_patch(self, patch: np.ndarray) -> np.ndarray:
        with self._encoders.one() as actor:
            return cast(np.ndarray, ray.get(actor.scores_of_patch.remote(patch)))


class RemoteVoice(Voice):
    """The character's voice from the shared encoders' Piper (same samples as a front end's own)."""

    def __init__(self, encoders: Spread, rate: int = OUTPUT_RATE, sampling_noise: bool = False) -> None:
        super().__init__(rate, sampling_noise)
        self._encoders = encoders

    async def synthesize_async(self, text: str, first: bool = False) -> Utterance:
        """``synthesize`` in an actor, a ``first`` sentence at the video's priority there (see ``Voice``)."""
        with self._encoders.one() as actor:
            speak: Any = actor.speak_first if first else actor.speak
            return cast(Utterance, await speak.remote(text, self.rate, self.sampling_noise))

    def synthesize(self, text: str) -> Utterance:
        """``text`` spoken by an actor, below the video's priority. Blocking: call it off the loop."""
        with self._encoders.one() as actor:
            return cast(Utterance, ray.get(actor.speak.remote(text, self.rate, self.sampling_noise)))

    def load(self) -> None:
        return None  # loaded in the actor
