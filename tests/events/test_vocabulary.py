"""The event vocabulary: tagged JSON, lanes, stamping, and registration of later event kinds."""

from __future__ import annotations

import msgspec
import pytest

from events.stamp import Stamper
from events.vocabulary import (
    EVENT_TYPES,
    AudioLevel,
    EndOfTurn,
    Event,
    Gesture,
    Lane,
    SpeechStarted,
    Transcript,
    decode_event,
    register,
)


def test_every_event_round_trips_through_json_with_its_type_tag() -> None:
    stamp = Stamper("sess")
    samples = [
        stamp(SpeechStarted, audio_ms=120.0),
        stamp(AudioLevel, audio_ms=20.0, rms_db=-40.0, peak=0.01, pitch_hz=180.0),
        stamp(Transcript, text="hello", final=True, audio_ms=900.0, start_ms=100.0),
        stamp(Gesture, gesture="wave", confidence=0.8, x=0.2, y=0.4),
        stamp(EndOfTurn, audio_ms=900.0, silence_ms=700.0, transcript="hello"),
    ]
    for event in samples:
        data = msgspec.json.encode(event)
        assert msgspec.json.decode(data)["type"] == type(event).__struct_config__.tag
        assert decode_event(data) == event


def test_stamped_events_have_unique_ids_their_session_and_a_monotonic_time() -> None:
    stamp = Stamper("abc")
    a, b = stamp(SpeechStarted, audio_ms=0.0), stamp(SpeechStarted, audio_ms=1.0)
    assert (a.id, b.id) == ("e1", "e2")
    assert a.session == b.session == "abc"
    assert 0 < a.t_ns <= b.t_ns


def test_streams_travel_in_the_bulk_lane_and_reactions_in_the_control_lane() -> None:
    stamp = Stamper("s")
    assert stamp(AudioLevel, audio_ms=0.0, rms_db=-50.0, peak=0.0).lane is Lane.BULK
    assert stamp(Transcript, text="he", final=False).lane is Lane.BULK
    assert stamp(Transcript, text="hello", final=True).lane is Lane.CONTROL
    assert stamp(SpeechStarted, audio_ms=0.0).lane is Lane.CONTROL


def test_events_are_immutable() -> None:
    event = Stamper("s")(SpeechStarted, audio_ms=0.0)
    with pytest.raises(AttributeError):
        event.audio_ms = 5.0  # type: ignore[misc]  # frozen: the test checks that it refuses


def test_decoding_rejects_an_unknown_type_tag() -> None:
    with pytest.raises(msgspec.ValidationError):
        decode_event(b'{"type": "no.such", "id": "e1", "session": "s", "t_ns": 1}')


def test_a_later_layer_can_register_its_own_event_kind() -> None:
    class PlanProgress(Event, frozen=True, kw_only=True, tag="test.plan_progress"):
        block: str

    try:
        register(PlanProgress)
        event = Stamper("s")(PlanProgress, block="b1")
        assert decode_event(msgspec.json.encode(event)) == event
    finally:
        EVENT_TYPES.remove(PlanProgress)
    with pytest.raises(msgspec.ValidationError):
        decode_event(msgspec.json.encode(event))
