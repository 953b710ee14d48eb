"""Protocol v1 in code: client messages decode or fail with the right error code; server frames encode."""

from __future__ import annotations

import json
import struct

import pytest

from server.protocol import (
    AudioHeader,
    Capabilities,
    Error,
    ErrorCode,
    InputGesture,
    Kind,
    ProtocolError,
    SessionStart,
    SessionStarted,
    VideoHeader,
    decode_audio_in,
    decode_client_text,
    decode_media,
    encode_media,
    encode_server,
)


def test_session_start_decodes_with_every_optional_field() -> None:
    msg = decode_client_text(
        json.dumps(
            {
                "type": "session.start",
                "ref": "r1",
                "seed": 7,
                "character": "fox",
                "plan": {"blocks": []},
                "director": "script",
                "resume": {"session_id": "s", "resume_token": "t"},
                "future_field": True,
            }
        )
    )
    assert isinstance(msg, SessionStart) and msg.resume is not None
    assert (msg.ref, msg.seed, msg.director, msg.resume.session_id) == ("r1", 7, "script", "s")


def test_every_client_message_type_in_the_protocol_decodes() -> None:
    samples: list[dict[str, object]] = [
        {"type": "input.text", "text": "hi"},
        {"type": "input.gesture", "gesture": "wave", "confidence": 0.5, "x": 0.1, "y": 0.9},
        {"type": "input.transcript", "text": "hello", "final": True},
        {"type": "response.interrupt"},
        {"type": "plan.run", "plan": "greeter"},
        {"type": "story.intervene", "text": "a storm comes"},
        {"type": "story.choose", "choice": "left"},
        {"type": "story.rewind", "checkpoint": "c1"},
        {"type": "ping", "ref": "p"},
    ]
    for sample in samples:
        assert decode_client_text(json.dumps(sample)).__struct_config__.tag == sample["type"]


@pytest.mark.parametrize(
    ("text", "code", "ref"),
    [
        ("{not json", ErrorCode.BAD_JSON, None),
        ("[1, 2]", ErrorCode.BAD_JSON, None),
        ('{"ref": "a"}', ErrorCode.BAD_FIELD, "a"),
        ('{"type": "dance", "ref": "b"}', ErrorCode.UNKNOWN_TYPE, "b"),
        ('{"type": "input.text", "ref": "c"}', ErrorCode.BAD_FIELD, "c"),
        ('{"type": "input.gesture", "gesture": 5, "ref": "d"}', ErrorCode.BAD_FIELD, "d"),
        ('{"type": "session.start", "director": "telepathy"}', ErrorCode.BAD_FIELD, None),
        ('{"type": "ping", "ref": "' + "x" * 65 + '"}', ErrorCode.BAD_FIELD, None),
        # A lone surrogate, raw or escaped, is no text a client can mean: bad JSON, not a crash.
        ('{"type": "input.text", "text": "\ud800"}', ErrorCode.BAD_JSON, None),
        (json.dumps({"type": "input.text", "text": "\ud800"}), ErrorCode.BAD_JSON, None),
    ],
)
def test_a_malformed_message_gets_its_error_code_and_echoes_its_ref(text: str, code: ErrorCode, ref) -> None:
    with pytest.raises(ProtocolError) as err:
        decode_client_text(text)
    assert err.value.code is code and err.value.ref == ref and not err.value.fatal


def test_a_text_message_over_64_kib_is_too_large() -> None:
    big = json.dumps({"type": "input.text", "text": "a" * (64 * 1024)})
    with pytest.raises(ProtocolError) as err:
        decode_client_text(big)
    assert err.value.code is ErrorCode.TOO_LARGE


def test_a_gesture_without_optional_fields_gets_defaults() -> None:
    msg = decode_client_text('{"type": "input.gesture", "gesture": "nod"}')
    assert isinstance(msg, InputGesture) and (msg.confidence, msg.x, msg.y) == (1.0, None, None)


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        (b"", ErrorCode.BAD_FIELD),
        (b"\x01", ErrorCode.BAD_FIELD),
        (b"\x01\x00", ErrorCode.BAD_FIELD),
        (b"\x02\x00\x00", ErrorCode.BAD_FIELD),
        (b"\x01" + b"\x00\x00" * 16_001, ErrorCode.TOO_LARGE),
    ],
    ids=["empty", "no samples", "odd bytes", "wrong kind", "over one second"],
)
def test_bad_audio_frames_are_refused(frame: bytes, code: ErrorCode) -> None:
    with pytest.raises(ProtocolError) as err:
        decode_audio_in(frame)
    assert err.value.code is code


def test_audio_frames_of_one_to_16000_samples_are_accepted() -> None:
    assert decode_audio_in(b"\x01\x10\x00") == b"\x10\x00"
    assert len(decode_audio_in(b"\x01" + b"\x00\x00" * 16_000)) == 32_000


def test_server_messages_carry_their_type_and_every_required_field() -> None:
    started = json.loads(
        encode_server(
            SessionStarted(
                session_id="s",
                resume_token="t",
                protocol=1,
                width=128,
                height=128,
                fps=24,
                chunk_frames=4,
                audio_in_rate=16_000,
                audio_out_rate=22_050,
                capabilities=Capabilities(
                    actions=["wave"], emotions=["happy"], gestures=["wave"], sounds=["Knock"]
                ),
            )
        )
    )
    assert started["type"] == "session.started" and started["protocol"] == 1 and "ref" not in started
    error = json.loads(encode_server(Error(code="bad_json", message="m", fatal=False, ref="r")))
    assert error == {"type": "error", "ref": "r", "code": "bad_json", "message": "m", "fatal": False}


def test_media_frames_have_a_kind_byte_a_big_endian_header_length_and_a_json_header() -> None:
    frame = encode_media(
        Kind.VIDEO,
        VideoHeader(seq=3, chunk=1, frame=0, pts_ms=166.67, width=128, height=128, reflects=["e4"]),
        b"\xff\xd8jpeg",
    )
    assert frame[0] == 0x02
    (n,) = struct.unpack(">I", frame[1:5])
    assert json.loads(frame[5 : 5 + n])["reflects"] == ["e4"]
    kind, header, payload = decode_media(frame)
    assert (kind, header["seq"], payload) == (Kind.VIDEO, 3, b"\xff\xd8jpeg")
    audio = encode_media(Kind.AUDIO_OUT, AudioHeader(seq=4, pts_ms=0.0, samples=2), b"\x00\x00\x01\x00")
    assert decode_media(audio)[:2] == (Kind.AUDIO_OUT, {"seq": 4, "pts_ms": 0.0, "samples": 2})
