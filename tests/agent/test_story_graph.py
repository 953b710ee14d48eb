"""Loading and validating stories: every rule gives a clear error naming the field at fault."""

from __future__ import annotations

import copy
import tomllib
from typing import Any

import pytest

from agent.story.format import STORIES_DIR, Beat, Choice, StoryError, load_story, story_from_builtins
from agent.story.graph import StoryGraph, compile_story
from streaming_model.manifest import build_manifest

MANIFEST = build_manifest()
SCENE_STORIES = {"stormy_night"}
"""Example stories that change the scene (they need a model that draws one)."""
GATE: dict[str, Any] = tomllib.loads((STORIES_DIR / "garden_gate.toml").read_text())


def problems(data: dict[str, Any]) -> list[str]:
    with pytest.raises(StoryError) as caught:
        compile_story(story_from_builtins(data), MANIFEST)
    return [str(p) for p in caught.value.problems]


def gate(**changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(GATE)
    data.update(changes)
    return data


@pytest.mark.parametrize("name", sorted(p.stem for p in STORIES_DIR.glob("*.toml")))
def test_the_example_stories_load(name: str) -> None:
    # A story that changes the scene needs a model that draws one (the world backend's vocabulary).
    graph = compile_story(load_story(name), build_manifest(scene=name in SCENE_STORIES))
    assert graph.spec.start in graph.beats
    assert any(b.spec.ending for b in graph.beats.values())


def test_a_story_that_changes_the_scene_is_refused_for_a_model_that_draws_none() -> None:
    with pytest.raises(StoryError) as refused:
        compile_story(load_story("stormy_night"), MANIFEST)
    assert "beats.dusk.plan.behaviors[0].changes: this model draws no scene" in str(refused.value)
    assert "beats.storm.choices[0].scene: this model draws no scene" in str(refused.value)


def test_a_choice_names_scene_parts_and_choices_the_model_draws() -> None:
    data = tomllib.loads((STORIES_DIR / "stormy_night.toml").read_text())
    data["beats"]["storm"]["choices"][0]["scene"] = {"door": "ajar"}
    with pytest.raises(StoryError, match=r"beats.storm.choices\[0\].scene.door: door must be one of"):
        compile_story(story_from_builtins(data), build_manifest(scene=True))


def test_the_short_story_has_about_five_beats_and_the_richer_one_more() -> None:
    assert 5 <= len(load_story("garden_gate").beats) <= 7
    assert len(load_story("lighthouse").beats) > len(load_story("garden_gate").beats)


def test_an_unknown_target_is_named_with_the_beats_there_are() -> None:
    data = gate()
    data["beats"]["porch"]["choices"][1]["target"] = "nowhere"
    data["beats"]["caught"] = {**data["beats"]["caught"], "ending": False}
    data["beats"]["caught"]["choices"] = [{"id": "flee", "label": "Flee", "target": "woods"}]
    assert problems(data) == [
        "beats.porch.choices[1].target: unknown target 'nowhere'; beats: "
        "['caught', 'door', 'garden', 'gate', 'gone', 'porch', 'shed']",
        "beats.caught.choices[0].target: unknown target 'woods'; beats: "
        "['caught', 'door', 'garden', 'gate', 'gone', 'porch', 'shed']",
    ]


def test_an_unreachable_beat_is_named() -> None:
    data = gate()
    data["beats"]["attic"] = {
        "description": "Nobody ever comes here.",
        "choices": [{"id": "down", "label": "Go down", "target": "gate"}],
    }
    assert problems(data) == [
        "beats.attic: unreachable: no sequence of choices from the start ('gate') leads here"
    ]


def test_a_loop_with_no_way_out_is_named_with_its_beats() -> None:
    data = gate()
    data["beats"]["shed"]["choices"].append(
        {"id": "maze", "label": "Crawl into the hedge", "target": "hedge"}
    )
    data["beats"]["hedge"] = {
        "description": "A hedge maze.",
        "choices": [{"id": "on", "label": "On", "target": "maze"}],
    }
    data["beats"]["maze"] = {
        "description": "Deeper in the maze.",
        "choices": [{"id": "back", "label": "Back", "target": "hedge"}],
    }
    assert problems(data) == [
        "beats.hedge: a loop with no way out: beats ['hedge', 'maze'] lead only to each other, never to an ending"
    ]


def test_a_beat_looping_on_itself_and_a_dead_end_are_named() -> None:
    data = gate()
    data["beats"]["shed"]["choices"].append({"id": "well", "label": "Look into the well", "target": "well"})
    data["beats"]["well"] = {
        "description": "An echoing well.",
        "choices": [{"id": "shout", "label": "Shout into it", "target": "well"}],
    }
    data["beats"]["shed"]["choices"].append({"id": "nap", "label": "Nap", "target": "nap"})
    data["beats"]["nap"] = {"description": "You fall asleep."}
    assert problems(data) == [
        "beats.well: a loop with no way out: every choice leads back to this beat",
        "beats.nap: dead end: not an ending, and no choice leads anywhere",
    ]


def test_a_story_without_an_ending_is_refused() -> None:
    data = {
        "id": "forever",
        "start": "a",
        "beats": {
            "a": {"description": "A", "choices": [{"id": "b", "label": "to b", "target": "b"}]},
            "b": {"description": "B", "choices": [{"id": "a", "label": "to a", "target": "a"}]},
        },
    }
    assert problems(data) == ["beats: the story has no ending: mark at least one beat `ending = true`"]


def test_bad_conditions_and_effects_are_named_with_their_choice() -> None:
    data = gate()
    data["beats"]["door"]["choices"][0]["when"] = "has_key and trust >="
    data["beats"]["gate"]["choices"][0]["effects"] = ["trust += 1", "courage = 3"]
    assert problems(data) == [
        "beats.gate.choices[0].effects[1]: bad effect 'courage = 3': unknown variable 'courage' "
        "(variables: has_key, trust) at column 1 ('courage')",
        "beats.door.choices[0].when: bad condition 'has_key and trust >=': expected a value, a variable or "
        "`(` at the end",
    ]


def test_bad_plans_are_named_down_to_the_behavior_field() -> None:
    data = gate()
    data["beats"]["gate"]["plan"]["behaviors"][0]["emotion"] = "smug"
    data["beats"]["garden"]["plan"] = "no_such_plan"
    found = problems(data)
    assert found[0] == (
        "beats.gate.plan.behaviors[0].emotion: unknown emotion 'smug'; known: "
        "['neutral', 'happy', 'sad', 'surprised', 'angry']"
    )
    assert found[1].startswith("beats.garden.plan: no plan named 'no_such_plan'; known plans: [")


def test_names_characters_endings_and_duplicates_are_checked_together() -> None:
    data = gate(start="lobby")
    data["beats"]["porch"]["goals"] = {"rex": "Bark"}
    data["beats"]["porch"]["choices"][1]["id"] = "ask"
    data["beats"]["gone"]["choices"] = [{"id": "again", "label": "Again", "target": "gate"}]
    assert problems(data) == [
        "start: no beat named 'lobby'; beats: ['caught', 'door', 'garden', 'gate', 'gone', 'porch', 'shed']",
        "beats.porch.goals.rex: unknown character 'rex'; characters: ['pip']",
        "beats.porch.choices[1].id: duplicate choice id 'ask' in this beat",
        "beats.gone.choices: an ending has no choices",
    ]


def test_a_wrong_shape_names_the_field() -> None:
    data = gate()
    data["beats"]["shed"]["choices"][0]["target"] = 3
    with pytest.raises(StoryError, match=r"^beats\.shed\.choices\[0\]\.target: Expected `str`, got `int`$"):
        story_from_builtins(data)
    with pytest.raises(StoryError, match=r"^beats\.shed\.colour: Object contains unknown field `colour`"):
        story_from_builtins(gate(beats={**GATE["beats"], "shed": {**GATE["beats"]["shed"], "colour": "red"}}))


def test_a_story_name_from_a_client_cannot_leave_the_stories_folder() -> None:
    with pytest.raises(StoryError, match="a story name is letters, digits"):
        load_story("../plans/greeter")
    with pytest.raises(StoryError, match=r"no story named 'atlantis'; known stories: \['garden_gate'"):
        load_story("atlantis")


# ---------------------------------------------------------------------------------------- branches


@pytest.fixture
def graph() -> StoryGraph:
    return compile_story(load_story("garden_gate"), MANIFEST)


def test_a_sound_branch_joins_the_session_graph_and_leaves_the_base_alone(graph: StoryGraph) -> None:
    storm = Beat(
        description="A storm blows the gate open.",
        choices=[Choice(id="run_in", label="Run in", target="garden", effects=["trust += 1"])],
    )
    grown = graph.with_branch("storm", storm)
    assert "storm" in grown.beats and grown.beats["storm"].branch
    assert "storm" not in graph.beats and dict(grown.branches) == {"storm": storm}
    assert grown.spec is graph.spec


def test_an_unsound_branch_is_refused_with_every_problem(graph: StoryGraph) -> None:
    bad = Beat(
        description="",
        goals={"rex": "Bark"},
        choices=[Choice(id="fly", label="Fly away", target="moon", when="wings > 0")],
    )
    with pytest.raises(StoryError) as caught:
        graph.with_branch("gate", bad)
    assert [str(p) for p in caught.value.problems] == [
        "branch.id: a beat named 'gate' exists already; pick a new id",
        "branch.gate.description: a beat needs a description",
        "branch.gate.goals.rex: unknown character 'rex'; characters: ['pip']",
        "branch.gate.choices[0].target: unknown target 'moon'; beats: "
        "['caught', 'door', 'garden', 'gate', 'gone', 'porch', 'shed']",
        "branch.gate.choices[0].when: bad condition 'wings > 0': unknown variable 'wings' "
        "(variables: has_key, trust) at column 1 ('wings')",
    ]


def test_a_branch_must_lead_back_into_the_story_or_end_it(graph: StoryGraph) -> None:
    with pytest.raises(StoryError, match=r"^branch\.limbo\.choices: a branch needs at least one choice"):
        graph.with_branch("limbo", Beat(description="Nothing happens."))
    with pytest.raises(StoryError, match=r"^branch\.limbo\.choices: a branch needs"):
        graph.with_branch(
            "limbo", Beat(description="Round.", choices=[Choice(id="again", label="Again", target="limbo")])
        )
    assert "end" in graph.with_branch("end", Beat(description="It all ends.", ending=True)).beats
