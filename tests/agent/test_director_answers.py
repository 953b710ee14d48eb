"""The Director never leaves the user unanswered: every kind of unusable reply from a real local
chat-completions server still ends in something the user sees or hears."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent.acknowledge import LABEL, Acknowledgement
from agent.director_graph import MAX_CALLS, MISSES
from agent.progress import DirectorError, DirectorPlan
from agent.script import script_from_builtins
from events.vocabulary import Event, SoundClass, TextInput
from tests.agent.stage import MANIFEST, Stage, make_stage
from tests.support.llm_server import Call, LLMServer, Reply


def tool_results(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [json.loads(m["content"]) for m in request["messages"] if m["role"] == "tool"]


def acknowledged(stage: Stage) -> tuple[list[DirectorError], list[DirectorPlan]]:
    """The notices the Director published and its acknowledgement plans (read once: it drains the bus)."""
    events = stage.seen(Event)
    notices = [e for e in events if isinstance(e, DirectorError)]
    plans = [e for e in events if isinstance(e, DirectorPlan) and e.summary == LABEL]
    return notices, plans


async def test_an_empty_reply_gets_a_notice_and_a_nod(stage: Stage) -> None:
    stage.llm.enqueue(Reply(text=""))
    turn = await stage.say("Are you there?")
    await stage.settle()
    notices, plans = acknowledged(stage)
    assert [n.message for n in notices] == ["the LLM gave no usable answer (an empty reply)"]
    assert all(n.code == "director" and not n.fatal for n in notices)
    assert len(plans) == 1 and len(stage.llm.requests) == 1
    out = stage.tick(1)[0]
    assert out.condition.action == "nod" and out.reflects == (turn.id,)
    assert stage.director.stats.unusable == 1 and stage.director.stats.acknowledged == 1


async def test_text_beside_calls_that_all_fail_is_spoken(stage: Stage) -> None:
    stage.llm.enqueue(Reply(text="Sure! Here I go.", tool_calls=[Call("dance", {"style": "tango"})]))
    await stage.say("Dance for me.")
    await stage.settle()
    assert stage.tick(1)[0].speech_start[0].text == "Sure! Here I go."
    assert acknowledged(stage) == ([], [])
    assert len(stage.llm.requests) == 1  # the spoken text ended the run
    said = (await stage.director.history())[1]["tool_calls"]
    assert [c["function"]["name"] for c in said] == ["dance", "say"]


async def test_a_rambling_plain_answer_is_cut_to_its_first_sentences(stage: Stage) -> None:
    sentence = "I really like talking about the weather and the sea and the long grey clouds. "
    stage.llm.enqueue(Reply(text=sentence * 30))
    await stage.say("Tell me something.")
    await stage.settle()
    spoken = stage.tick(1)[0].speech_start[0].text
    assert spoken.startswith(sentence.strip()) and spoken.endswith(".") and len(spoken) < len(sentence) * 6


UNUSABLE = {
    # A call cut by max_tokens: its arguments end mid-string.
    "truncated": Reply(tool_calls=[Call("say", '{"text": "Hello the')], finish_reason="length"),
    "garbled": Reply(tool_calls=[Call("say", "<|tool_call|>say(text=hello)")]),
    "unknown tool": Reply(tool_calls=[Call("teleport", {"where": "moon"})]),
    "invalid argument": Reply(tool_calls=[Call("say", {"text": "x" * 700})]),
}


@pytest.mark.parametrize("kind", list(UNUSABLE))
async def test_an_unusable_call_twice_ends_in_a_notice_and_an_acknowledgement(
    stage: Stage, kind: str
) -> None:
    reply = UNUSABLE[kind]
    stage.llm.enqueue(reply, reply, Reply(tool_calls=[Call("say", {"text": "Never asked for."})]))
    await stage.bus.publish(stage.stamp(TextInput, text="Say hello."))
    await stage.settle()
    # The LLM was told once what was wrong, got it wrong again, and the run gave up (not max_steps).
    assert len(stage.llm.requests) == MISSES < stage.director.config.max_steps
    [error] = tool_results(stage.llm.requests[1])
    assert error["ok"] is False and error["error"]
    notices, plans = acknowledged(stage)
    name = reply.tool_calls[0].name
    assert [n.message for n in notices] == [
        f"the LLM gave no usable answer (tool calls that could not be used: {name})"
    ]
    assert len(plans) == 1
    outs = stage.tick(3)
    assert outs[0].condition.action == "nod" and not any(o.speech_start for o in outs)


async def test_a_call_fixed_after_its_error_is_the_answer(stage: Stage) -> None:
    stage.llm.enqueue(
        UNUSABLE["invalid argument"], Reply(tool_calls=[Call("say", {"text": "Hello!"})]), Reply(text="")
    )
    await stage.bus.publish(stage.stamp(TextInput, text="Say hello."))
    await stage.settle()
    assert stage.tick(1)[0].speech_start[0].text == "Hello!"
    assert acknowledged(stage) == ([], [])


async def test_the_session_script_lends_its_own_acknowledgement(llm: LLMServer) -> None:
    script = script_from_builtins(
        {
            "name": "polite",
            "trigger": [
                {
                    "on": "text",
                    "behaviors": [
                        {"kind": "action", "name": "nod", "duration_s": 1.0},
                        {"kind": "speech", "text": "Hmm, let me think."},
                    ],
                }
            ],
        },
        MANIFEST,
    )
    stage = make_stage(llm, acknowledgement=Acknowledgement(MANIFEST, script))
    try:
        llm.enqueue(Reply(text=""))
        await stage.bus.publish(stage.stamp(TextInput, text="What is the meaning of life?"))
        await stage.settle()
        out = stage.tick(1)[0]
        assert out.condition.action == "nod" and out.speech_start[0].text == "Hmm, let me think."
    finally:
        await stage.director.stop()


async def test_what_the_user_did_not_ask_for_is_not_acknowledged(stage: Stage) -> None:
    stage.llm.enqueue(Reply(text=""))
    await stage.bus.publish(stage.stamp(SoundClass, audio_ms=1.0, label="Knock", score=0.9))
    await stage.settle()
    assert len(stage.llm.requests) == 1
    assert acknowledged(stage) == ([], [])


async def test_a_reply_of_too_many_calls_runs_only_the_first(stage: Stage) -> None:
    nods = [Call("perform", {"action": "nod", "duration_s": 0.5}) for _ in range(MAX_CALLS + 9)]
    stage.llm.enqueue(Reply(tool_calls=nods), Reply(text=""))
    await stage.bus.publish(stage.stamp(TextInput, text="Nod a lot."))
    await stage.settle()
    results = tool_results(stage.llm.requests[1])
    assert [r["ok"] for r in results] == [True] * MAX_CALLS + [False] * 9
    assert stage.director.stats.plans == MAX_CALLS
