"""The Director steering a story through a real local chat-completions server: an intervention mapped
onto a choice, a branch written, validated and followed, an unsound branch refused with the reason fed
back to the LLM, and the Director's memory rewound with the story."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from agent.director import Director
from agent.director_config import DirectorConfig
from agent.realizer import Realizer
from agent.story.format import load_story
from agent.story.player import StoryPlayer
from streaming_model.manifest import build_manifest
from tests.support.llm_server import Call, LLMServer, Reply
from tools.character import build_toolbox
from tools.story import register_story_tools

MANIFEST = build_manifest()


@dataclass
class Table:
    llm: LLMServer
    realizer: Realizer
    director: Director
    player: StoryPlayer

    async def settle(self) -> None:
        async with asyncio.timeout(10.0):
            await self.director.settle()


@pytest.fixture
async def table() -> AsyncIterator[Table]:
    async with LLMServer() as llm:
        realizer = Realizer(session="s1")
        box = build_toolbox(MANIFEST)
        config = DirectorConfig(base_url=llm.base_url, debounce_s=0.01, timeout_s=5.0, retries=0)
        director = Director(config, realizer, box, session="s1", manifest=MANIFEST)
        player = await StoryPlayer.begin(load_story("garden_gate"), realizer, session="s1", director=director)
        register_story_tools(box, player)
        director.start()
        yield Table(llm, realizer, director, player)
        await director.stop()


def tool_results(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [json.loads(m["content"]) for m in request["messages"] if m["role"] == "tool"]


async def test_the_director_maps_an_intervention_onto_an_offered_choice(table: Table) -> None:
    table.llm.enqueue(Reply(tool_calls=[Call("story_choose", {"choice": "wave"})]))
    answer = await table.player.intervene("Be nice to the fox")
    assert answer.outcome == "asked" and table.player.view().node == "gate"
    await table.settle()
    first = table.llm.requests[0]
    assert {"story_choose", "story_add_branch", "say"} <= {t["function"]["name"] for t in first["tools"]}
    system = first["messages"][0]["content"]
    assert "Current beat `gate`: Pip stands before a locked garden gate" in system
    assert "Choices offered now: `wave`: Wave at Pip; `sneak`: Sneak around the back" in system
    assert 'The user steps into the story: "Be nice to the fox"' in first["messages"][-1]["content"]
    view = table.player.view()
    assert view.node == "porch" and view.variables["trust"] == 1
    assert (view.history[-1].via, view.history[-1].choice, view.history[-1].text) == (
        "intervention",
        "wave",
        "Be nice to the fox",
    )
    assert tool_results(table.llm.requests[1]) == [
        {
            "ok": True,
            "result": {
                "beat": "porch",
                "checkpoint": "c2",
                "ending": False,
                "choices": [
                    {"id": "ask", "label": "Offer to search the shed"},
                    {"id": "leave", "label": "Say goodbye and leave"},
                ],
            },
        }
    ]


async def test_an_unsound_branch_is_refused_back_to_the_llm_and_a_sound_one_is_followed(table: Table) -> None:
    bad = {
        "id": "storm",
        "description": "A storm blows the gate open.",
        "say": "Whoa, what a wind!",
        "emotion": "surprised",
        "choices": [{"id": "fly", "label": "Ride the wind", "target": "moon", "when": "wings > 0"}],
    }
    good = {
        **bad,
        "choices": [
            {"id": "run_in", "label": "Run into the garden", "target": "door", "effects": ["has_key = true"]},
            {"id": "shelter", "label": "Shelter in the shed", "target": "shed"},
        ],
    }
    table.llm.enqueue(
        Reply(tool_calls=[Call("story_add_branch", bad)]),
        Reply(tool_calls=[Call("story_add_branch", good)]),
    )
    await table.player.intervene("A storm should blow the gate open")
    await table.settle()
    refused = tool_results(table.llm.requests[1])[0]
    assert refused == {
        "ok": False,
        "error": "the branch was refused: branch.storm.choices[0].target: unknown target 'moon'; beats: "
        "['caught', 'door', 'garden', 'gate', 'gone', 'porch', 'shed', 'storm']; "
        "branch.storm.choices[0].when: bad condition 'wings > 0': unknown variable 'wings' "
        "(variables: has_key, trust) at column 1 ('wings')",
        "field": "branch.storm.choices[0].target",
    }
    assert tool_results(table.llm.requests[2])[-1]["result"]["beat"] == "storm"
    view = table.player.view()
    assert view.node == "storm" and [c.id for c in view.choices] == ["run_in", "shelter"]
    assert "storm" not in table.player.graph.spec.beats  # the base story is untouched
    outs = [table.realizer.tick(k) for k in range(3)]
    assert outs[0].speech_start[0].text == "Whoa, what a wind!"  # the branch's plan plays

    view = await table.player.choose("run_in")  # the story follows the branch back into the graph
    assert view.node == "door" and view.variables == {"trust": 0, "has_key": True}
    assert [c.id for c in view.choices] == ["force", "give_up"]
    assert [(n.beat, n.parent) for n in view.history] == [("gate", None), ("storm", "c1"), ("door", "c2")]


async def test_a_rewind_puts_the_directors_memory_back(table: Table) -> None:
    table.llm.enqueue(
        Reply(tool_calls=[Call("remember", {"fact": "The user likes foxes."})]),
        Reply(tool_calls=[Call("story_choose", {"choice": "sneak"})]),
    )
    await table.player.intervene("Sneak past the fox, I like foxes though")
    await table.settle()
    assert await table.director.memory() == ["The user likes foxes."]
    assert table.player.view().node == "shed"
    await table.player.rewind("c1")
    assert await table.director.memory() == [] and await table.director.history() == []
    await table.player.rewind("c2")  # taken inside the run, after `remember` had answered
    assert await table.director.memory() == ["The user likes foxes."]
    await table.player.rewind("c1")
    # A move the LLM makes for a stale intervention after a rewind is refused: the story is elsewhere.
    table.llm.enqueue(Reply(tool_calls=[Call("story_choose", {"choice": "take_key"})]))
    table.director.observe('The user typed: "grab it"')
    await table.settle()
    error = tool_results(table.llm.requests[-1])[-1]
    assert error["ok"] is False and error["error"].startswith(
        "the choice was refused: choice: no choice 'take_key'"
    )
    assert table.player.view().node == "gate"


async def test_a_choice_named_exactly_needs_no_llm_and_a_closed_story_leaves_the_prompt(table: Table) -> None:
    answer = await table.player.intervene("Sneak around the back")
    assert (answer.outcome, answer.choice) == ("chosen", "sneak")
    assert table.player.view().node == "shed" and table.llm.requests == []
    await table.player.close()
    table.director.observe('The user typed: "hi"')
    await table.settle()
    assert "Current beat" not in table.llm.requests[0]["messages"][0]["content"]
