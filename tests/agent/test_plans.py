"""Behavior plans: validation against the manifest, sync-point resolution, JSON and TOML round trips."""

from __future__ import annotations

import pytest

from agent.plan_checks import validate_block
from agent.plan_io import block_from_json, block_from_toml, block_to_json, block_to_toml
from agent.plan_timing import resolve
from agent.plans import (
    Action,
    Behavior,
    Block,
    Emotion,
    Gaze,
    Move,
    PlanError,
    SceneEvent,
    Speech,
    SpeechFacts,
    SyncRef,
    Wait,
)
from agent.speech_timing import estimate_speech_s, heard_prefix, word_time
from streaming_model.manifest import build_manifest

MANIFEST = build_manifest()


def greeting() -> Block:
    return Block(
        source="script",
        priority=2,
        epoch=3,
        composition="append",
        expires_s=4.0,
        locks=["gaze"],
        cause="e7",
        label="greet",
        behaviors=[
            Speech(id="hi", text="Well, hello there, friend!", emotion="happy"),
            Action(id="wave", name="wave", params={"paw": "left"}, stroke=SyncRef(to="hi", word="hello")),
            Move(id="go", x=-0.9, start=SyncRef(to="hi", point="end", offset_s=2.0)),
            Gaze(x=0.5, y=-0.25, duration_s=1.0),
            Emotion(emotion="surprised", end=SyncRef(to="hi", point="end")),
            SceneEvent(name="shadow", start=SyncRef(to="go", point="stroke")),
            Action(name="look_at", params={"target_x": 0.3, "target_y": -1.0}, duration_s=1.5),
            Wait(duration_s=0.5, start=SyncRef(to="go", point="end")),
        ],
    )


def test_a_valid_block_gets_ids_for_behaviors_that_had_none() -> None:
    block = validate_block(greeting(), MANIFEST)
    assert [b.id for b in block.behaviors] == [
        "hi",
        "wave",
        "go",
        "gaze1",
        "emotion1",
        "scene1",
        "action1",
        "wait1",
    ]


def test_a_block_survives_json_and_toml_round_trips_unchanged() -> None:
    block = validate_block(greeting(), MANIFEST)
    assert block_from_json(block_to_json(block)) == block
    text = block_to_toml(block)
    assert block_from_toml(text) == block
    assert '[[behaviors]]\nkind = "speech"' in text


@pytest.mark.parametrize(
    ("behavior", "field", "words"),
    [
        (Action(name="fly"), "behaviors[0].name", "unknown action 'fly'"),
        (Action(name="wave", params={"paw": "up"}), "behaviors[0].params.paw", "one of ['left', 'right']"),
        (Action(name="wave", params={"speed": 2.0}), "behaviors[0].params.speed", "no parameter 'speed'"),
        (Action(name="look_at", params={"target_x": 3.0}), "behaviors[0].params.target_x", "at most 1.0"),
        (Action(name="nod", duration_s=-1.0), "behaviors[0].duration_s", "at least"),
        (Speech(text="  "), "behaviors[0].text", "needs some text"),
        (Speech(text="hi", emotion="smug"), "behaviors[0].emotion", "unknown emotion 'smug'"),
        (Emotion(emotion="bored"), "behaviors[0].emotion", "unknown emotion"),
        (Gaze(x=float("nan")), "behaviors[0].x", "finite"),
        (Move(x=-2.0), "behaviors[0].x", "at least -1.0"),
        (SceneEvent(name="rain"), "behaviors[0].name", "unknown scene event 'rain'"),
        (
            Wait(duration_s=0.5, start=SyncRef(to="ghost")),
            "behaviors[0].start.to",
            "no behavior with id 'ghost'",
        ),
        (Wait(id="w", duration_s=0.5, start=SyncRef(to="w")), "behaviors[0].start.to", "itself"),
    ],
)
def test_an_invalid_behavior_is_rejected_naming_the_field(behavior: Behavior, field: str, words: str) -> None:
    with pytest.raises(PlanError) as caught:
        validate_block(Block(behaviors=[behavior]), MANIFEST)
    assert caught.value.field == field
    assert words in str(caught.value)


def test_a_word_reference_must_name_a_word_of_a_speech() -> None:
    block = Block(
        behaviors=[
            Speech(id="s", text="good morning"),
            Action(name="wave", stroke=SyncRef(to="s", word="hello")),
        ]
    )
    with pytest.raises(PlanError) as caught:
        validate_block(block, MANIFEST)
    assert caught.value.field == "behaviors[1].stroke.word"


def test_the_end_of_an_open_ended_behavior_cannot_be_referred_to() -> None:
    block = Block(
        behaviors=[Emotion(id="e", emotion="happy"), Wait(duration_s=1, start=SyncRef(to="e", point="end"))]
    )
    with pytest.raises(PlanError) as caught:
        validate_block(block, MANIFEST)
    assert caught.value.field == "behaviors[1].start.point"


def test_cyclic_references_are_rejected() -> None:
    block = Block(
        behaviors=[
            Wait(id="a", duration_s=1, start=SyncRef(to="b")),
            Wait(id="b", duration_s=1, start=SyncRef(to="a")),
        ]
    )
    with pytest.raises(PlanError, match="cycle"):
        validate_block(block, MANIFEST)


def test_malformed_json_and_toml_name_the_problem() -> None:
    with pytest.raises(PlanError) as caught:
        block_from_json(b'{"behaviors": [{"kind": "dance"}]}')
    assert caught.value.field == "behaviors[0].kind"
    with pytest.raises(PlanError) as caught:
        block_from_json(b'{"behaviors": [], "colour": 1}')
    assert caught.value.field == "colour"
    with pytest.raises(PlanError, match="not valid TOML"):
        block_from_toml("behaviors = [")


def test_empty_and_oversized_blocks_are_rejected() -> None:
    with pytest.raises(PlanError) as caught:
        validate_block(Block(behaviors=[]), MANIFEST)
    assert caught.value.field == "behaviors"
    with pytest.raises(PlanError, match="at most 64 behaviors"):
        validate_block(Block(behaviors=[Wait(duration_s=1.0)] * 65), MANIFEST)
    with pytest.raises(PlanError, match="at most 2000 characters") as caught:
        validate_block(Block(behaviors=[Speech(text="a" * 2001)]), MANIFEST)
    assert caught.value.field == "behaviors[0].text"


def test_a_stroke_on_a_word_lands_when_that_word_is_spoken() -> None:
    text = "Well, hello there, friend!"
    block = validate_block(
        Block(
            behaviors=[
                Speech(id="hi", text=text),
                Action(id="w", name="wave", stroke=SyncRef(to="hi", word="hello")),
            ]
        ),
        MANIFEST,
    )
    t = resolve(block, chunk_s=MANIFEST.chunk_s)
    spoken = estimate_speech_s(text)
    start, at = t["hi"].start, word_time(text, spoken, "hello")
    assert start is not None and at is not None
    assert t["w"].stroke == pytest.approx(start + at)
    # The wave starts before the speech so that its stroke can meet the word: the block is pulled back.
    assert t["w"].start == 0.0 and t["hi"].start > 0.0


def test_two_seconds_after_the_speech_ends_uses_the_reported_duration() -> None:
    block = validate_block(
        Block(
            behaviors=[
                Speech(id="s", text="Hi."),
                Move(id="m", x=0.5, start=SyncRef(to="s", point="end", offset_s=2)),
            ]
        ),
        MANIFEST,
    )
    t = resolve(block, {"s": SpeechFacts(duration_s=3.0)}, position=0.0, chunk_s=MANIFEST.chunk_s)
    assert t["m"].start == pytest.approx(5.0)
    assert t["m"].end == pytest.approx(5.0 + 0.5 / (36 / 42))


def test_heard_prefix_keeps_only_whole_words_played() -> None:
    text = "one two three four"
    assert heard_prefix(text, 4.0, 0.0) == ""
    assert heard_prefix(text, 4.0, 2.2) == "one two"
    assert heard_prefix(text, 4.0, 10.0) == text
