"""Session protocol v1 (docs/protocol.md) as types: every message, the binary framing, the errors.

This module is the contract in code. It decodes what a client sends into typed messages (or a
``ProtocolError`` with the protocol's error code, carrying the message's ``ref`` when one could be read),
and encodes what the server sends. Fields may be added, never changed.
"""

from __future__ import annotations

import enum
import struct
from typing import Annotated, Any, Literal, Union

import msgspec
import numpy as np

from agent.bounds import MAX_JSON_DEPTH

PROTOCOL_VERSION = 1
AUDIO_IN_RATE = 16_000
MAX_REF_CHARS = 64
MAX_TEXT_BYTES = 64 * 1024
MAX_AUDIO_SAMPLES = 16_000
HARD_MAX_MESSAGE_BYTES = 1024 * 1024


class Kind(enum.IntEnum):
    """The first byte of a binary frame."""

    AUDIO_IN = 0x01
    VIDEO = 0x02
    AUDIO_OUT = 0x03
    VOICE_IN = 0x04
    """(Extension) The character's voice from the client's own voice pipeline (``server.client_voice``)."""


class ErrorCode(enum.StrEnum):
    BAD_JSON = "bad_json"
    UNKNOWN_TYPE = "unknown_type"
    BAD_FIELD = "bad_field"
    TOO_LARGE = "too_large"
    RATE_LIMITED = "rate_limited"
    NOT_STARTED = "not_started"
    UNAUTHORIZED = "unauthorized"
    RESUME_FAILED = "resume_failed"
    DIRECTOR = "director"
    INTERNAL = "internal"


class ProtocolError(Exception):
    """A client message the server refuses: answered with an ``error`` message, fatal or not."""

    def __init__(self, code: ErrorCode, message: str, ref: str | None = None, fatal: bool = False) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.ref = ref
        self.fatal = fatal


# ---------------------------------------------------------------------------------------------- client


class ClientMessage(msgspec.Struct, kw_only=True, tag_field="type"):
    """Base of every client message; ``ref`` is echoed in every answer to it."""

    ref: str | None = None


class Resume(msgspec.Struct, kw_only=True):
    session_id: str
    resume_token: str


class SessionStart(ClientMessage, kw_only=True, tag="session.start"):
    seed: int | None = None
    character: str | None = None
    plan: str | dict[str, Any] | None = None
    story: str | None = None
    director: Literal["auto", "script", "llm", "none"] = "auto"
    resume: Resume | None = None
    splice: bool = False
    """The client reads ``reflects`` on every video frame: a reaction may show from a frame of the chunk
    playing (see Splices in docs/protocol.md)."""


class InputText(ClientMessage, kw_only=True, tag="input.text"):
    text: str


class InputGesture(ClientMessage, kw_only=True, tag="input.gesture"):
    gesture: str
    confidence: float = 1.0
    x: float | None = None
    y: float | None = None


class InputTranscript(ClientMessage, kw_only=True, tag="input.transcript"):
    text: str
    final: bool


class ResponseInterrupt(ClientMessage, kw_only=True, tag="response.interrupt"):
    pass


class PlanRun(ClientMessage, kw_only=True, tag="plan.run"):
    plan: str | dict[str, Any]


class StoryIntervene(ClientMessage, kw_only=True, tag="story.intervene"):
    text: str


class StoryChoose(ClientMessage, kw_only=True, tag="story.choose"):
    choice: str


class StoryRewind(ClientMessage, kw_only=True, tag="story.rewind"):
    checkpoint: str


class Ping(ClientMessage, kw_only=True, tag="ping"):
    pass


class VoiceStart(ClientMessage, kw_only=True, tag="voice.start"):
    """(Extension) A segment of the character's voice begins: the binary kind 0x04 frames that follow are
    its audio, PCM16 LE mono at the session's ``audio_out_rate``."""


class VoiceEnd(ClientMessage, kw_only=True, tag="voice.end"):
    """(Extension) The open voice segment has all its audio."""


class InputSpeech(ClientMessage, kw_only=True, tag="input.speech"):
    """(Extension) The user started or stopped speaking, as the client's own voice pipeline detected it."""

    state: Literal["started", "stopped"]


MAX_CAMERA_MS = 1e12
"""The latest landmark frame time accepted (ms on the client's clock: about 30 years)."""
Coordinate = Annotated[float, msgspec.Meta(ge=-0.5, le=1.5)]
"""A landmark's x or y in the picture (0..1; a point of a hand at the edge may lie a little outside)."""
Point = tuple[Coordinate, Coordinate]


class InputLandmarks(ClientMessage, kw_only=True, tag="input.landmarks"):
    """(Extension) What the client's camera shows at ``t_ms``, as landmarks only (``server.client_camera``):
    one hand's 21 points and the face's 6 keypoints, each absent (null) when not seen."""

    t_ms: Annotated[float, msgspec.Meta(ge=0.0, le=MAX_CAMERA_MS)]
    hand: Annotated[list[Point], msgspec.Meta(min_length=21, max_length=21)] | None = None
    face: Annotated[list[Point], msgspec.Meta(min_length=6, max_length=6)] | None = None


CLIENT_MESSAGES: tuple[type[ClientMessage], ...] = (
    SessionStart,
    InputText,
    InputGesture,
    InputTranscript,
    ResponseInterrupt,
    PlanRun,
    StoryIntervene,
    StoryChoose,
    StoryRewind,
    Ping,
    VoiceStart,
    VoiceEnd,
    InputSpeech,
    InputLandmarks,
)
_BY_TYPE: dict[str, type[ClientMessage]] = {str(m.__struct_config__.tag): m for m in CLIENT_MESSAGES}
_DECODERS = {tag: msgspec.json.Decoder(cls) for tag, cls in _BY_TYPE.items()}
_ANY = msgspec.json.Decoder(Any)


_NOT_STRUCTURE = bytes(c for c in range(256) if c not in b'"[]{}')


def json_depth(raw: bytes) -> int:
    """How deep arrays and objects nest in the JSON text ``raw`` (brackets inside strings do not count).

    A few linear passes in C and numpy, cheap beside decoding, so that nesting can be refused before it
    reaches a decoder's (or any recursive reader's) limits. Malformed JSON gets some number; the decoder
    refuses it anyway."""
    # Without escaped backslashes, then escaped quotes, every quote left opens or closes a string.
    structure = raw.replace(b"\\\\", b"").replace(b'\\"', b"").translate(None, _NOT_STRUCTURE)
    codes = np.frombuffer(structure, dtype=np.uint8)
    quote = codes == ord('"')
    outside = np.cumsum(quote) % 2 == 0  # an odd number of quotes before a bracket: it is in a string
    opening = (codes == ord("[")) | (codes == ord("{"))
    closing = (codes == ord("]")) | (codes == ord("}"))
    steps = (opening & outside).astype(np.int32) - (closing & outside)
    return int(np.cumsum(steps).max(initial=0))


def decode_client_text(data: str | bytes) -> ClientMessage:
    """Decode one text frame; raises ``ProtocolError`` (bad_json, unknown_type, bad_field, too_large).

    Arrays and objects nested deeper than ``MAX_JSON_DEPTH`` are refused as ``bad_json`` before decoding.
    """
    # surrogatepass: a lone surrogate becomes the invalid UTF-8 it is, which the decoder refuses.
    raw = data.encode(errors="surrogatepass") if isinstance(data, str) else data
    if (depth := json_depth(raw)) > MAX_JSON_DEPTH:
        raise ProtocolError(
            ErrorCode.BAD_JSON, f"nested {depth} levels deep; at most {MAX_JSON_DEPTH} levels are accepted"
        )
    try:
        obj = _ANY.decode(raw)
    except msgspec.DecodeError as exc:
        raise ProtocolError(ErrorCode.BAD_JSON, f"not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ProtocolError(ErrorCode.BAD_JSON, "a message must be a JSON object")
    ref = obj.get("ref")
    if ref is not None and (not isinstance(ref, str) or len(ref) > MAX_REF_CHARS):
        raise ProtocolError(
            ErrorCode.BAD_FIELD, f"ref must be a string of at most {MAX_REF_CHARS} characters"
        )
    if len(raw) > MAX_TEXT_BYTES:
        # Checked after parsing (the transport caps messages at 1 MiB) so the answer can echo the ref.
        raise ProtocolError(
            ErrorCode.TOO_LARGE, f"text message of {len(raw)} bytes is over {MAX_TEXT_BYTES}; dropped", ref
        )
    kind = obj.get("type")
    if not isinstance(kind, str):
        raise ProtocolError(ErrorCode.BAD_FIELD, "a message needs a string field 'type'", ref)
    decoder = _DECODERS.get(kind)
    if decoder is None:
        raise ProtocolError(ErrorCode.UNKNOWN_TYPE, f"unknown message type {kind!r}", ref)
    try:
        return decoder.decode(raw)
    except msgspec.ValidationError as exc:
        raise ProtocolError(ErrorCode.BAD_FIELD, f"{kind}: {exc}", ref) from None


def decode_audio_in(frame: bytes) -> bytes:
    """The PCM payload of an audio-in binary frame (kind 0x01, 1 to 16000 samples)."""
    if not frame:
        raise ProtocolError(ErrorCode.BAD_FIELD, "empty binary frame")
    if frame[0] != Kind.AUDIO_IN:
        raise ProtocolError(
            ErrorCode.BAD_FIELD,
            f"clients send binary kind 0x01 (audio) or 0x04 (voice), got 0x{frame[0]:02x}",
        )
    return _pcm_payload(frame, MAX_AUDIO_SAMPLES)


def decode_voice_in(frame: bytes, max_samples: int) -> bytes:
    """(Extension) The PCM payload of a voice-in binary frame (kind 0x04, 1 to ``max_samples`` samples)."""
    if frame[:1] != bytes([Kind.VOICE_IN]):
        raise ProtocolError(ErrorCode.BAD_FIELD, "not a voice frame (kind 0x04)")
    return _pcm_payload(frame, max_samples)


def _pcm_payload(frame: bytes, max_samples: int) -> bytes:
    payload = frame[1:]
    if len(payload) % 2:
        raise ProtocolError(ErrorCode.BAD_FIELD, f"PCM16 audio needs an even byte count, got {len(payload)}")
    samples = len(payload) // 2
    if samples > max_samples:
        raise ProtocolError(ErrorCode.TOO_LARGE, f"audio frame of {samples} samples is over {max_samples}")
    if samples == 0:
        raise ProtocolError(ErrorCode.BAD_FIELD, "audio frame holds no samples")
    return payload


# ---------------------------------------------------------------------------------------------- server


class ServerMessage(msgspec.Struct, kw_only=True, tag_field="type", omit_defaults=True):
    """Base of every server message; ``ref`` echoes the client message it answers.

    Fields with defaults are left out when they hold their default (``ref`` when unset), so every field
    that docs/protocol.md lists as always present has no default here.
    """

    ref: str | None = None


class Capabilities(msgspec.Struct, kw_only=True):
    actions: list[str]
    emotions: list[str]
    gestures: list[str]
    sounds: list[str]
    scene: dict[str, list[str]] = {}
    """(Extension) The scene the model draws: part -> its choices, the first the default; empty when it
    draws none."""


class SessionStarted(ServerMessage, kw_only=True, tag="session.started"):
    session_id: str
    resume_token: str
    protocol: int
    width: int
    height: int
    fps: int
    chunk_frames: int
    audio_in_rate: int
    audio_out_rate: int
    capabilities: Capabilities
    splices: bool = False
    """Whether this connection's session splices reactions into the chunk playing (asked for with
    ``session.start`` ``splice``, and the server and its generator can); left out when not."""


class InputAccepted(ServerMessage, kw_only=True, tag="input.accepted"):
    event_id: str
    kind: str


class InputOutcome(ServerMessage, kw_only=True, tag="input.outcome"):
    """(Extension) Input ``event_id`` will not show in any frame, and why (``reason``: ``cooldown``,
    ``no_reaction``, ``outranked``, ``stale``, ``expired``, ``replaced``, ``interrupted``, ``interrupt``,
    ``away``: it showed in a frame no client was connected for); ``detail`` says it in words. An input that shows gets no such message: a frame's ``reflects`` names it."""

    event_id: str
    shown: bool
    reason: str
    detail: str


class InputSpeechStarted(ServerMessage, kw_only=True, tag="input.speech_started"):
    event_id: str
    audio_ms: float


class InputSpeechStopped(ServerMessage, kw_only=True, tag="input.speech_stopped"):
    event_id: str
    audio_ms: float


class InputSound(ServerMessage, kw_only=True, tag="input.sound"):
    event_id: str
    label: str
    score: float
    audio_ms: float


class InputTranscriptOut(ServerMessage, kw_only=True, tag="input.transcript"):
    event_id: str
    text: str
    final: bool


class InputGestureSeen(ServerMessage, kw_only=True, tag="input.gesture"):
    """(Extension) A gesture recognised in the client's ``input.landmarks``: event ``event_id``, seen in the
    frame at the client's ``t_ms`` (``x``, ``y`` where: the fingertip of a point, else the hand or nose)."""

    event_id: str
    gesture: str
    confidence: float
    x: float | None = None
    y: float | None = None
    t_ms: float


class CharacterSpeech(ServerMessage, kw_only=True, tag="character.speech"):
    text: str
    state: Literal["started", "ended", "interrupted"]
    heard_text: str | None = None


class DirectorPlan(ServerMessage, kw_only=True, tag="director.plan"):
    plan_id: str
    epoch: int
    summary: str


class StoryState(ServerMessage, kw_only=True, tag="story.state"):
    """docs/protocol.md: the original fields, plus (extensions) the story's variables, whether it has ended
    and whether a rewind continued the picture only approximately."""

    node: str
    choices: list[dict[str, Any]]
    checkpoint: str
    history: list[Any]
    variables: dict[str, Any] | None = None
    ending: bool = False
    approximate: bool = False
    """True on the state a rewind (or a resume) put back when the backend's snapshots are not exact: the
    story is the checkpoint's, the picture continues only close to (or apart from) how it was there."""


class GeneratorMoved(ServerMessage, kw_only=True, tag="generator.moved"):
    """(Extension) The worker generating this session died and the session continues on another: from
    generator chunk ``gen_chunk`` (the video header's), after a freeze of ``frozen_ms``; ``exact`` when the
    picture continues exactly as it would have."""

    gen_chunk: int
    frozen_ms: float
    exact: bool


class Metrics(ServerMessage, kw_only=True, tag="metrics"):
    fps: float
    on_time: float
    reaction_ms_p50: float | None
    reaction_ms_p95: float | None
    queue: int


class Error(ServerMessage, kw_only=True, tag="error"):
    code: str
    message: str
    fatal: bool


class Pong(ServerMessage, kw_only=True, tag="pong"):
    pass


class VoiceStarted(ServerMessage, kw_only=True, tag="voice.started"):
    """(Extension) Voice segment ``segment`` sounds from the frame at ``pts_ms`` on."""

    segment: str
    pts_ms: float


class VoiceEnded(ServerMessage, kw_only=True, tag="voice.ended"):
    """(Extension) Voice segment ``segment`` is over: its audio sounds in no frame from ``pts_ms`` on;
    ``interrupted`` when it was cut (``response.interrupt``, a story rewind) before all of it played."""

    segment: str
    pts_ms: float
    interrupted: bool


class SceneChanged(ServerMessage, kw_only=True, tag="scene.changed"):
    """(Extension) From media chunk ``chunk`` on (its first frame at ``pts_ms``) the picture shows
    ``scene``: every part the chunk's condition names, part -> choice; the parts not named are at their
    defaults (the first of their choices in ``capabilities.scene``)."""

    chunk: int
    pts_ms: float
    scene: dict[str, str]


_ENCODER = msgspec.json.Encoder()


def encode_server(message: ServerMessage) -> str:
    """A server message as the text of one WebSocket frame."""
    return _ENCODER.encode(message).decode()


def error_message(exc: ProtocolError) -> Error:
    return Error(code=str(exc.code), message=exc.message, fatal=exc.fatal, ref=exc.ref)


class VideoHeader(msgspec.Struct, kw_only=True):
    """docs/protocol.md: the video header, plus two extensions: ``gen_chunk``, the generator's own chunk
    index, which equals ``chunk`` until a story rewind sends the generator back while the media clock goes
    on; and ``sent_ms``, when the server sent the frame (milliseconds since the session was made, on the
    server's clock), which tells a late send from a late receipt."""

    seq: int
    chunk: int
    frame: int
    pts_ms: float
    width: int
    height: int
    reflects: list[str] = []
    gen_chunk: int | None = None
    sent_ms: float | None = None


class AudioHeader(msgspec.Struct, kw_only=True):
    seq: int
    pts_ms: float
    samples: int


def encode_media(kind: Kind, header: VideoHeader | AudioHeader, payload: bytes) -> bytes:
    """A binary frame: kind byte, 4-byte big-endian header length, JSON header, payload."""
    head = _ENCODER.encode(header)
    return bytes([kind]) + struct.pack(">I", len(head)) + head + payload


def decode_media(frame: bytes) -> tuple[Kind, dict[str, Any], bytes]:
    """Split a server binary frame into (kind, header, payload): for clients and tests."""
    kind = Kind(frame[0])
    (n,) = struct.unpack(">I", frame[1:5])
    return kind, msgspec.json.decode(frame[5 : 5 + n]), frame[5 + n :]


AnyServerMessage = Union[  # noqa: UP007 (kept as a named union for clients that decode everything)
    SessionStarted,
    InputAccepted,
    InputOutcome,
    InputSpeechStarted,
    InputSpeechStopped,
    InputSound,
    InputTranscriptOut,
    InputGestureSeen,
    CharacterSpeech,
    DirectorPlan,
    StoryState,
    GeneratorMoved,
    Metrics,
    Error,
    Pong,
    VoiceStarted,
    VoiceEnded,
    SceneChanged,
]
