"""What a session says to its client, before any wire format: media, notices and figures.

A transport turns these into its own messages (``server.adapter`` for the WebSocket protocol). Media
(``VideoOut``, ``AudioOut``) may be dropped for a client that cannot keep up, but for the frames that
answer inputs; everything else may not.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol, Union

import msgspec

from agent.progress import CharacterSpeech, DirectorError, DirectorPlan
from agent.story.state import StoryView
from events.vocabulary import SoundClass, SoundOnset, SpeechStarted, SpeechStopped, Transcript
from streaming_model.worker import WorkerMoved


class VideoOut(msgspec.Struct, frozen=True, kw_only=True):
    """One video frame: ``frame`` of media chunk ``chunk`` (generator chunk ``gen_chunk``), at ``pts_ms``;
    ``reflects`` (on a chunk's first frame) the events whose effect first entered the generation here;
    ``sent_ms`` when it went out, in milliseconds on the session's clock since the session was made."""

    chunk: int
    frame: int
    pts_ms: float
    width: int
    height: int
    reflects: tuple[str, ...]
    gen_chunk: int
    sent_ms: float
    jpeg: bytes


class AudioOut(msgspec.Struct, frozen=True, kw_only=True):
    """The character's audio for one video frame: PCM 16-bit LE mono at the session's audio rate."""

    pts_ms: float
    pcm: bytes
    samples: int


class StoryMoved(msgspec.Struct, frozen=True, kw_only=True):
    """The story moved to ``view``; ``approximate`` when a rewind or resume could not restore the picture
    exactly."""

    view: StoryView
    approximate: bool


class SceneChanged(msgspec.Struct, frozen=True, kw_only=True):
    """From media chunk ``chunk`` on (its first frame at ``pts_ms``) the scene is ``scene``: the (part,
    choice) pairs its condition names, every other part at its default. Told before that chunk's first
    frame when it differs from the scene of the chunk sent before it (or, on a new connection, when it names
    any part)."""

    chunk: int
    pts_ms: float
    scene: tuple[tuple[str, str], ...]


class Unshown(msgspec.Struct, frozen=True, kw_only=True):
    """Input ``event_id`` will not show in any frame, and why."""

    event_id: str
    reason: str
    detail: str


class Figures(msgspec.Struct, frozen=True, kw_only=True):
    """The session's figures now: frame rate over the last second, on-time share, reaction times."""

    fps: float
    on_time: float
    reaction_ms_p50: float | None
    reaction_ms_p95: float | None
    queue: int


Heard = Union[SpeechStarted, SpeechStopped, SoundOnset, SoundClass, Transcript]  # noqa: UP007
"""What the ears heard, told to the client as it happens."""

Progress = Union[CharacterSpeech, DirectorPlan, DirectorError]  # noqa: UP007
"""What the minds did that the client hears of."""

Notice = Union[Heard, Progress, StoryMoved, SceneChanged, Unshown, Figures, WorkerMoved]  # noqa: UP007
Output = Union[VideoOut, AudioOut, Notice]  # noqa: UP007

Sink = Callable[[Output], Awaitable[None]]
"""Where a session's outputs go: the transport's sender for the connection the client is on."""


def answers(item: Output) -> tuple[str, ...]:
    """The inputs ``item`` is the outcome of: a video frame's ``reflects``, else none."""
    return item.reflects if isinstance(item, VideoOut) else ()


def droppable(item: Output) -> bool:
    """Whether a client that cannot keep up may lose ``item``: media, but for a video frame whose
    ``reflects`` names inputs (it is their outcome: every accepted input gets one)."""
    return isinstance(item, (VideoOut, AudioOut)) and not answers(item)


class Observer(Protocol):
    """Who watches how sessions do (the server's metrics): told of each reaction, each chunk, each spoken
    turn answered and each stretch of the character's speech lined up with its mouth."""

    def reaction(self, kind: str, seconds: float) -> None:
        """An input of ``kind`` showed in a frame sent ``seconds`` after it arrived."""

    def chunk(self, seconds: float, on_time: bool) -> None:
        """A chunk took ``seconds`` to generate and finish, and was (or was not) ready for its send."""

    def cpu_note(self) -> str:
        """Where the server's CPU went lately, for a late chunk's warning (``server.cpu_watch``); empty
        when unknown."""

    def voice_to_voice(self, seconds: float) -> None:
        """The first audible sample of the character's answer went out ``seconds`` after the end of the
        user's speech it answers."""

    def lip_sync(self, offset_s: float) -> None:
        """Over a stretch of speech sent, the mouth was ``offset_s`` behind the voice (+ = mouth late)."""
