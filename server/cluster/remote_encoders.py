"""The front end's side of the shared encoders (``encoders``): a ``Transcriber``, a ``YamNet`` and a
``Voice`` whose models run in the cluster's one ``SharedEncoders`` actor.

    voice, hearing = shared_voice_and_hearing(TranscriberConfig(), speculate=True)   # after RaySlots.connect
    factory = SessionFactory(None, voice, hearing, workers=slots)

Everything else stays as in a front end of its own: segments are cut and checked here and still queue on
this front end's transcriber thread (which waits for the actor), log-mel patches are made here and only
their classes are asked for, and speech is asked for by sentence as the speech player goes. Blocking calls
(``ray.get``) are made only where the in-process models would block: on the transcriber's and the ears'
threads, and in ``Voice.synthesize``, which runs off the event loop.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import ray
from ray.actor import ActorHandle

from events.hearing import Hearing
from events.sound_classes import SoundClassConfig
from events.transcriber import Transcriber, TranscriberConfig
from events.yamnet import YamNet
from server.cluster.encoders import NAME, SharedEncoders
from server.cluster.remote import NAMESPACE, ClusterError
from server.voice import OUTPUT_RATE, Utterance, Voice


def shared_encoders(
    transcripts: TranscriberConfig, sounds: SoundClassConfig, timeout_s: float
) -> ActorHandle:
    """The cluster's encoders actor (made by the first front end that asks; detached, so it outlives
    it), with its models loaded. Ray must be joined already (``RaySlots.connect``). Blocks: call it in a
    thread."""
    actor = SharedEncoders.options(  # type: ignore[attr-defined]
        name=NAME,
        namespace=NAMESPACE,
        get_if_exists=True,
        lifetime="detached",
        max_restarts=-1,  # a killed encoder comes back (the calls in flight fail)
    ).remote(transcripts, sounds)
    try:
        ray.get(actor.load.remote(), timeout=timeout_s)
    except ray.exceptions.GetTimeoutError:
        raise ClusterError(f"the shared encoders were not up within {timeout_s:g} s") from None
    return actor


def shared_voice_and_hearing(
    transcripts: TranscriberConfig,
    speculate: bool,
    sounds: SoundClassConfig = SoundClassConfig(),  # noqa: B008 (an immutable Struct)
    timeout_s: float = 180.0,
) -> tuple[Voice, Hearing]:
    """The voice and the hearing of a front end whose encoders are the cluster's (a transcriber with an
    endpoint of its own keeps it: nothing to share). Blocks: call it in a thread."""
    encoders = shared_encoders(transcripts, sounds, timeout_s)
    transcriber = RemoteTranscriber(encoders, transcripts) if transcripts.endpoint is None else None
    hearing = Hearing(sounds, transcripts, speculate, yamnet=RemoteYamNet(encoders), transcriber=transcriber)
    return RemoteVoice(encoders), hearing


class RemoteTranscriber(Transcriber):
    """A ``Transcriber`` whose words come from the shared encoders' Whisper."""

    def __init__(self, encoders: ActorHandle, config: TranscriberConfig) -> None:
        super().__init__(config)
        self._encoders = encoders

    def _load(self) -> None:
        return None  # loaded in the actor

    def _text(self, audio: np.ndarray) -> str:
        return cast(str, ray.get(self._encoders.transcribe.remote(audio)))


class RemoteYamNet(YamNet):
    """YAMNet in the shared encoders: patches are made here (``scores``), their classes there."""

    def __init__(self, encoders: ActorHandle) -> None:
        # Not YamNet's own: nothing is loaded here.
        self._encoders = encoders
        self.labels = ray.get(encoders.labels.remote())

    def scores_of_patch(self, patch: np.ndarray) -> np.ndarray:
        return cast(np.ndarray, ray.get(self._encoders.scores_of_patch.remote(patch)))


class RemoteVoice(Voice):
    """The character's voice from the shared encoders' Piper (same samples as a front end's own)."""

    def __init__(self, encoders: ActorHandle, rate: int = OUTPUT_RATE, sampling_noise: bool = False) -> None:
        super().__init__(rate, sampling_noise)
        self._encoders = encoders

    async def synthesize_async(self, text: str, first: bool = False) -> Utterance:
        """``synthesize`` in the actor, a ``first`` sentence at the video's priority there (see ``Voice``)."""
        speak: Any = self._encoders.speak_first if first else self._encoders.speak
        return cast(Utterance, await speak.remote(text, self.rate, self.sampling_noise))

    def synthesize(self, text: str) -> Utterance:
        """``text`` spoken by the actor, below the video's priority. Blocking: call it off the loop."""
        return cast(Utterance, ray.get(self._encoders.speak.remote(text, self.rate, self.sampling_noise)))

    def load(self) -> None:
        return None  # loaded in the actor
