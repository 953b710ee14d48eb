"""The event vocabulary: everything the character can perceive, as typed, tagged msgspec Structs.

Every event carries an id, the session it belongs to and its monotonic arrival time in nanoseconds. Events
that come from the input audio also carry their position in that audio (``audio_ms``), counted from the
first sample the session received, so reactions can be matched to the exact moment they answer.

Events are immutable and serialise to JSON with a ``type`` tag (``msgspec.json.encode``); ``decode_event``
turns such JSON back into the right class. Later issues add their own event classes by subclassing
``Event`` with a ``tag`` and listing them in ``EVENT_TYPES`` through ``register``.
"""

from __future__ import annotations

import enum
from typing import Any, ClassVar, Literal, Union

import msgspec


class Lane(enum.IntEnum):
    """Delivery lane: control events overtake bulk ones in every subscriber's queue."""

    CONTROL = 0
    BULK = 1


class Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    """Base of every event. ``id`` is unique within its session; ``t_ns`` is ``time.monotonic_ns()``."""

    id: str
    session: str
    t_ns: int

    lane: ClassVar[Lane] = Lane.CONTROL


class SpeechStarted(Event, frozen=True, kw_only=True, tag="speech.started"):
    """The user started speaking at ``audio_ms`` (the first voiced sample, as the VAD places it)."""

    audio_ms: float


class SpeechStopped(Event, frozen=True, kw_only=True, tag="speech.stopped"):
    """The user stopped speaking at ``audio_ms``; ``duration_ms`` is the length of the speech segment.

    ``heard_ms`` is where the audio heard when the closing silence began ends (the ``SilenceBegan`` that
    this stop confirms): the segment's transcript is made of the audio up to there. None: not known (a
    client's own voice), the audio up to ``audio_ms`` and a little after."""

    audio_ms: float
    duration_ms: float
    heard_ms: float | None = None


class Hint(Event, frozen=True, kw_only=True):
    """What one of the ears' listeners tells the others and nothing else: never published, so it takes no
    id from the session's count (``id`` is empty)."""


class SilenceBegan(Hint, frozen=True, kw_only=True, tag="speech.silence_began"):
    """Inside a confirmed speech segment that began at ``start_ms``, the VAD heard its first window of
    silence, which ends at ``heard_ms``. Tentative: speech may resume before the silence is long enough to
    stop the segment. A transcriber may start on the audio heard so far; the ``SpeechStopped`` that follows,
    if one does, carries the same ``heard_ms``."""

    start_ms: float
    heard_ms: float


class AudioLevel(Event, frozen=True, kw_only=True, tag="audio.level"):
    """Loudness of one short frame of input audio (bulk: many per second)."""

    audio_ms: float
    rms_db: float
    peak: float
    pitch_hz: float | None = None

    lane: ClassVar[Lane] = Lane.BULK


class Transcript(Event, frozen=True, kw_only=True, tag="transcript"):
    """Words recognised in the segment [``start_ms``, ``audio_ms``] of input audio, or sent by a client."""

    text: str
    final: bool
    audio_ms: float | None = None
    start_ms: float | None = None
    source: Literal["server", "client"] = "server"

    @property
    def lane(self) -> Lane:  # type: ignore[override]  # by finality here, a ClassVar elsewhere
        # A partial transcript is a stream; only the final one may trigger a reaction.
        return Lane.CONTROL if self.final else Lane.BULK


class SoundOnset(Event, frozen=True, kw_only=True, tag="sound.onset"):
    """A sudden rise in energy (a clap, a knock, a bang) at ``audio_ms``, before it has a class."""

    audio_ms: float
    strength_db: float


class SoundClass(Event, frozen=True, kw_only=True, tag="sound.class"):
    """A non-speech sound recognised by YAMNet in the window ending at ``audio_ms``."""

    audio_ms: float
    label: str
    score: float
    onset_id: str | None = None


class Gesture(Event, frozen=True, kw_only=True, tag="gesture"):
    """A gesture by the user, reported by a client or recognised from the landmarks of its camera."""

    gesture: str
    confidence: float = 1.0
    x: float | None = None
    y: float | None = None
    source: Literal["client", "landmarks"] = "client"


class TextInput(Event, frozen=True, kw_only=True, tag="text"):
    """The user typed something."""

    text: str


class Interrupt(Event, frozen=True, kw_only=True, tag="interrupt"):
    """Stop what the character is doing now (speech and current behaviour)."""

    reason: Literal["user", "barge_in", "system"] = "user"


class EndOfTurn(Event, frozen=True, kw_only=True, tag="turn.ended"):
    """The user has finished a turn: silence for ``silence_ms`` after speech that ended at ``audio_ms``.

    ``speech_end_ns`` is when (monotonic ns) that speech ended, as the audio clock places it against the
    audio heard when the turn ended (exact when audio arrives in real time); ``transcript_ns`` is when
    the turn's last final transcript arrived (None without one): a turn's first stages, for tracing.
    """

    audio_ms: float
    silence_ms: float
    transcript: str | None = None
    speech_end_ns: int | None = None
    transcript_ns: int | None = None


EVENT_TYPES: list[type[Event]] = [
    SpeechStarted,
    SpeechStopped,
    AudioLevel,
    Transcript,
    SoundOnset,
    SoundClass,
    Gesture,
    TextInput,
    Interrupt,
    EndOfTurn,
]

_decoders: dict[tuple[type[Event], ...], msgspec.json.Decoder[Any]] = {}


def register(event_type: type[Event]) -> type[Event]:
    """Add an event class (defined by a later layer) to the union that ``decode_event`` understands."""
    if event_type not in EVENT_TYPES:
        EVENT_TYPES.append(event_type)
    return event_type


def decode_event(data: bytes | str) -> Event:
    """Decode JSON produced by ``msgspec.json.encode(event)`` back into its event class."""
    key = tuple(EVENT_TYPES)
    decoder = _decoders.get(key)
    if decoder is None:
        decoder = _decoders[key] = msgspec.json.Decoder(Union[key])  # noqa: UP007 (a union built at run time)
    return decoder.decode(data)
