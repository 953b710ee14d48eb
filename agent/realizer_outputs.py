"""What the realizer answers: each chunk's output, the speech it cues, and its verdict on a submission."""

from __future__ import annotations

import msgspec

from streaming_model.condition import ChunkCondition


class SpeechCue(msgspec.Struct, frozen=True):
    """Speech the server should synthesise and play from the start of ``chunk``."""

    speech_id: str
    block_id: str
    source: str
    text: str
    emotion: str | None
    estimate_s: float
    chunk: int
    cause: str | None = None
    """The input its block answers (``Block.cause``): its stages are traced under that id."""
    open: bool = False
    """More text follows (``Realizer.open_speech``): a later ``speech_extend`` cue carries the whole text;
    until then the voice must not end when it runs out of audio."""


class ChunkOutput(msgspec.Struct, frozen=True):
    """Everything the realizer decided for one chunk.

    speech_stop: ids of speech to cut now (the server answers with ``speech_interrupted``).
    reflects: ids of events whose blocks first show in this chunk. owners: channel -> block id.
    """

    chunk: int
    condition: ChunkCondition
    speech_start: tuple[SpeechCue, ...] = ()
    speech_stop: tuple[str, ...] = ()
    scene_events: tuple[str, ...] = ()
    reflects: tuple[str, ...] = ()
    owners: dict[str, str] = {}
    speech_extend: tuple[SpeechCue, ...] = ()
    """Open speech already cued, now with its whole text (it starts with the text cued before)."""


class Submission(msgspec.Struct, frozen=True):
    """The realizer's answer to ``submit``: accepted or not, and why not."""

    block_id: str
    accepted: bool
    reason: str = ""
    after: tuple[str, ...] = ()
