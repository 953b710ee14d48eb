"""The Director's tools: schemas generated from the manifest, blocks reaching the realizer, errors as results."""

from __future__ import annotations

import json

import msgspec
import pytest

from agent.plans import Action, Block, Move, Speech, SyncRef, Wait
from agent.realizer import Realizer
from agent.script import Place
from agent.tooling import ToolContext
from streaming_model.manifest import (
    ACTION_NAMES,
    EMOTIONS,
    SCENE_EVENTS,
    ActionSpec,
    ParamSpec,
    build_manifest,
)
from tools.character import build_toolbox
from tools.emit import delayed
from tools.registry import Tool, ToolBox, ToolResult, parameters_schema
from tools.schedule import MAX_BEHAVIORS, SCENE_NOT_SHOWN

MANIFEST = build_manifest()
TOOL_NAMES = [
    "perform",
    "say",
    "set_emotion",
    "look_at",
    "move_to",
    "schedule_block",
    "wait",
    "remember",
]


@pytest.fixture
def realizer() -> Realizer:
    return Realizer()


@pytest.fixture
def ctx(realizer: Realizer) -> ToolContext:
    return ToolContext(submit=realizer.submit, places={"window": Place(x=-0.85, gaze=(-1.0, -0.4))})


def blocks_of(realizer: Realizer, ctx: ToolContext) -> list[Block]:
    return [e.block for e in realizer._entries if e.block.id in ctx.submitted]


def test_every_tool_is_offered_with_an_object_schema() -> None:
    schemas = build_toolbox(MANIFEST).schemas()
    assert [s["function"]["name"] for s in schemas] == TOOL_NAMES
    shown = [s["function"]["name"] for s in build_toolbox(MANIFEST, scene_shown=True).schemas()]
    assert shown == [*TOOL_NAMES[:5], "scene_event", *TOOL_NAMES[5:]]
    for s in schemas:
        assert s["type"] == "function"
        assert s["function"]["parameters"]["type"] == "object"
        json.dumps(s)  # plain JSON, as sent to the endpoint


def test_enums_come_from_the_manifest() -> None:
    schemas = {
        s["function"]["name"]: s["function"]["parameters"]
        for s in build_toolbox(MANIFEST, ("window",), scene_shown=True).schemas()
    }
    assert set(schemas["perform"]["properties"]["action"]["enum"]) == set(ACTION_NAMES)
    assert set(schemas["perform"]["properties"]["side"]["anyOf"][0]["enum"]) == {"other", "left", "right"}
    assert set(schemas["set_emotion"]["properties"]["emotion"]["enum"]) == set(EMOTIONS)
    assert set(schemas["scene_event"]["properties"]["name"]["enum"]) == set(SCENE_EVENTS)
    assert schemas["move_to"]["properties"]["place"]["anyOf"][0]["enum"] == ["window"]
    # The plan types travel as $defs inside schedule_block's parameters, so its $refs resolve.
    block = schemas["schedule_block"]
    refs = json.dumps(block).count('"$ref": "#/$defs/')
    assert refs > 0 and {"Action", "Speech", "SyncRef"} <= set(block["$defs"])


async def test_say_with_a_gesture_on_a_word_becomes_one_synchronised_block(
    realizer: Realizer, ctx: ToolContext
) -> None:
    box = build_toolbox(MANIFEST)
    result = await box.call(
        "say", '{"text": "Hello there, friend", "gesture": "wave", "on_word": "friend"}', ctx
    )
    assert result.ok, result
    [block] = blocks_of(realizer, ctx)
    speech, wave = block.behaviors
    assert isinstance(speech, Speech) and speech.text == "Hello there, friend"
    assert isinstance(wave, Action) and wave.stroke is not None and wave.stroke.word == "friend"
    assert block.composition == "append"


async def test_each_tool_reaches_the_realizer(realizer: Realizer, ctx: ToolContext) -> None:
    box = build_toolbox(MANIFEST, ("window",), scene_shown=True)
    calls = {
        "perform": {"action": "wave", "paw": "left", "duration_s": 1.5},
        "set_emotion": {"emotion": "happy"},
        "look_at": {"place": "window", "turn_head": True},
        "move_to": {"x": 0.5},
        "scene_event": {"name": SCENE_EVENTS[0]},
        "schedule_block": {
            "behaviors": [{"kind": "action", "name": "nod"}, {"kind": "speech", "text": "Yes."}]
        },
    }
    for name, arguments in calls.items():
        result = await box.call(name, json.dumps(arguments), ctx)
        assert result.ok, (name, result)
    assert len(blocks_of(realizer, ctx)) == len(calls)
    look = blocks_of(realizer, ctx)[2].behaviors[0]
    assert isinstance(look, Action) and look.params == {"target_x": -1.0, "target_y": -0.4}


async def test_while_the_scene_is_not_drawn_no_tool_says_ok_to_a_scene_change(
    realizer: Realizer, ctx: ToolContext
) -> None:
    box = build_toolbox(MANIFEST)
    offered = await box.call("scene_event", json.dumps({"name": SCENE_EVENTS[0]}), ctx)
    assert not offered.ok and "unknown tool 'scene_event'" in (offered.error or "")
    scene = {"kind": "scene", "name": SCENE_EVENTS[0]}
    alone = await box.call("schedule_block", json.dumps({"behaviors": [scene]}), ctx)
    assert not alone.ok and alone.error == SCENE_NOT_SHOWN and not ctx.submitted
    nod = {"kind": "action", "name": "nod"}
    mixed = await box.call("schedule_block", json.dumps({"behaviors": [nod, scene]}), ctx)
    # Validated and played (the nod), and the answer says what the user will not see.
    assert mixed.ok and mixed.result["not_shown"] == {"scene": [SCENE_EVENTS[0]], "why": SCENE_NOT_SHOWN}
    assert len(blocks_of(realizer, ctx)) == 1
    shown = await build_toolbox(MANIFEST, scene_shown=True).call(
        "schedule_block", json.dumps({"behaviors": [nod, scene]}), ctx
    )
    assert shown.ok and "not_shown" not in shown.result


async def test_a_huge_block_is_refused_before_it_reaches_the_realizer(
    realizer: Realizer, ctx: ToolContext
) -> None:
    nods = [{"kind": "action", "name": "nod", "duration_s": 0.5}] * (MAX_BEHAVIORS + 1)
    result = await build_toolbox(MANIFEST).call("schedule_block", json.dumps({"behaviors": nods}), ctx)
    assert not result.ok and result.field == "behaviors" and not ctx.submitted


async def test_remember_keeps_facts_and_wait_delays_later_plans(realizer: Realizer, ctx: ToolContext) -> None:
    box = build_toolbox(MANIFEST)
    assert (await box.call("remember", '{"fact": "The user is called Ada."}', ctx)).ok
    assert ctx.memory == ["The user is called Ada."]
    assert (await box.call("wait", '{"seconds": 2}', ctx)).result == {"delay_s": 2.0}
    assert (await box.call("move_to", '{"x": -0.5}', ctx)).ok
    [block] = blocks_of(realizer, ctx)
    delay, move = block.behaviors
    assert isinstance(delay, Wait) and delay.duration_s == 2.0
    assert isinstance(move, Move) and move.start is not None and move.start.to == "_delay"


@pytest.mark.parametrize(
    ("name", "arguments", "field"),
    [
        ("perform", '{"action": "fly"}', "action"),
        ("perform", '{"action": "wave", "duration_s": -3}', "duration_s"),
        ("perform", '{"action": "wave", "colour": "red"}', None),
        ("say", '{"text": ""}', "text"),
        ("say", '{"text": "hi", "on_word": "hi"}', "on_word"),
        ("say", '{"text": "hi", "gesture": "wave", "on_word": "bye"}', "on_word"),
        ("perform", '{"action": "nod", "paw": "left"}', "paw"),
        ("look_at", "{}", "x"),
        ("look_at", '{"place": "moon"}', "place"),
        ("move_to", '{"x": 7}', "x"),
        (
            "schedule_block",
            '{"behaviors": [{"kind": "action", "name": "wave", "params": {"paw": "up"}}]}',
            "behaviors[0].params.paw",
        ),
        ("schedule_block", '{"behaviors": []}', "behaviors"),
    ],
)
async def test_bad_arguments_come_back_as_tool_errors(
    name: str, arguments: str, field: str | None, ctx: ToolContext
) -> None:
    result = await build_toolbox(MANIFEST).call(name, arguments, ctx)
    assert not result.ok and result.error
    if field is not None:
        assert result.field == field
    assert json.loads(result.to_text())["ok"] is False


async def test_unknown_tools_and_broken_json_are_errors_too(ctx: ToolContext) -> None:
    box = build_toolbox(MANIFEST)
    unknown = await box.call("dance", "{}", ctx)
    assert not unknown.ok and "perform" in (unknown.error or "")
    broken = await box.call("say", '{"text": "hi', ctx)
    assert not broken.ok and "not valid JSON" in (broken.error or "")


async def test_a_refused_block_is_an_error_not_an_exception(ctx: ToolContext, realizer: Realizer) -> None:
    realizer.advance_epoch("director")
    stale = ToolContext(submit=lambda block: realizer.submit(msgspec.structs.replace(block, epoch=0)))
    result = await build_toolbox(MANIFEST).call("perform", '{"action": "nod"}', stale)
    assert not result.ok and "stale" in (result.error or "")


def test_a_toolbox_refuses_two_tools_of_one_name() -> None:
    class NoArgs(msgspec.Struct):
        pass

    async def handler(args: NoArgs, ctx: None) -> dict:
        return {}

    box: ToolBox[None] = ToolBox()
    box.register(Tool("x", "x", NoArgs, handler))
    with pytest.raises(ValueError, match="already registered"):
        box.register(Tool("x", "x", NoArgs, handler))
    assert parameters_schema(NoArgs) == {"type": "object", "properties": {}, "required": []}


def test_delayed_keeps_behaviors_that_are_placed_by_reference() -> None:
    after_speech = SyncRef(to="s", point="end")
    block = Block(behaviors=[Speech(id="s", text="Hi"), Action(name="nod", start=after_speech)])
    speech, nod = delayed(block, 1.0).behaviors[1:]
    assert speech.start == SyncRef(to="_delay", point="end")
    assert nod.start == after_speech
    assert ToolResult(ok=True).to_text() == '{"ok":true}'


async def test_a_model_with_other_capabilities_gets_other_tools() -> None:
    dance = ActionSpec(
        "dance", "Dance.", (ParamSpec("speed", "float", "How fast.", 0.5, 2.0, (), 1.0),), True
    )
    manifest = msgspec.structs.replace(MANIFEST, actions=(*MANIFEST.actions, dance), emotions=("calm",))
    box = build_toolbox(manifest)
    perform = box.schemas()[0]["function"]["parameters"]["properties"]
    assert "dance" in perform["action"]["enum"]
    assert perform["speed"]["anyOf"][0] == {
        "description": "How fast.",
        "type": "number",
        "minimum": 0.5,
        "maximum": 2.0,
    }
    realizer = Realizer(manifest=manifest)
    ctx = ToolContext(submit=realizer.submit)
    assert (await box.call("perform", '{"action": "dance", "speed": 1.5}', ctx)).ok
    assert (await box.call("perform", '{"action": "dance", "speed": 3}', ctx)).field == "speed"
    assert (await box.call("set_emotion", '{"emotion": "happy"}', ctx)).field == "emotion"
