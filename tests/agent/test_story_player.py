"""Playing a story in a session: beats into the realizer, choices, interventions without an LLM, rewind,
forks in the history tree, and persistence through SQLite."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

import pytest

from agent.realizer import ChunkOutput, Realizer
from agent.story.format import StoryError, load_story
from agent.story.player import StoryPlayer
from agent.story.state import StoryView
from agent.story.store import CheckpointStore
from events.bus import EventBus
from events.stamp import Stamper
from events.vocabulary import Gesture
from streaming_model.manifest import build_manifest


def tick(realizer: Realizer, count: int) -> list[ChunkOutput]:
    start = realizer.chunk + 1
    return [realizer.tick(k) for k in range(start, start + count)]


def tree(view: StoryView) -> list[tuple[str, str | None, str, str]]:
    return [(n.checkpoint, n.parent, n.beat, n.via) for n in view.history]


async def begin(
    store: CheckpointStore | None = None, realizer: Realizer | None = None, **kwargs: Any
) -> tuple[StoryPlayer, Realizer]:
    realizer = realizer or Realizer(session="s1")
    player = await StoryPlayer.begin(load_story("garden_gate"), realizer, session="s1", store=store, **kwargs)
    return player, realizer


async def test_a_scripted_playthrough_choose_intervene_rewind_choose_differently() -> None:
    player, realizer = await begin()
    seen: list[StoryView] = []
    player.subscribe(seen.append)
    view = player.view()
    assert (view.node, view.checkpoint, view.variables) == ("gate", "c1", {"trust": 0, "has_key": False})
    assert [(c.id, c.label) for c in view.choices] == [
        ("wave", "Wave at Pip"),
        ("sneak", "Sneak around the back"),
    ]
    out = tick(realizer, 4)
    assert out[0].speech_start[0].text == "Hello? Who goes there?"  # the start beat's plan plays

    view = await player.choose("wave")
    assert (view.node, view.variables["trust"]) == ("porch", 1)
    answer = await player.intervene("Let's search the shed for that key")
    assert (answer.outcome, answer.choice) == ("chosen", "ask")
    assert player.view().node == "shed" and player.view().variables["trust"] == 2
    view = await player.choose("take_key")
    assert view.node == "door" and view.variables == {"trust": 2, "has_key": True}
    assert [c.id for c in view.choices] == ["open", "give_up"]  # `force` needs trust < 2

    restored = await player.rewind("c2")  # back to the porch: trust 1, no key
    assert (restored.view.node, restored.view.variables) == ("porch", {"trust": 1, "has_key": False})
    view = await player.choose("leave")
    assert view.node == "gone" and view.ending and view.choices == []
    assert tree(view) == [
        ("c1", None, "gate", "start"),
        ("c2", "c1", "porch", "choice"),
        ("c3", "c2", "shed", "intervention"),
        ("c4", "c3", "door", "choice"),
        ("c5", "c2", "gone", "choice"),  # a fork: both timelines stay in the tree
    ]
    assert view.history[2].text == "Let's search the shed for that key"
    assert [v.node for v in seen] == ["porch", "shed", "door", "porch", "gone"]


async def test_rewind_restores_variables_and_the_realizer_exactly() -> None:
    player, realizer = await begin()
    tick(realizer, 6)
    await player.choose("sneak")  # checkpoint c2 at chunk 5, the shed's plan queued
    first = tick(realizer, 40)
    await player.choose("take_key")
    tick(realizer, 12)
    restored = await player.rewind("c2")
    assert restored.chunk == 5 and realizer.chunk == 5
    assert restored.view.variables == {"trust": 0, "has_key": False}
    assert tick(realizer, 40) == first
    # The rewound-to node grows a second child when the story moves on.
    await player.choose("back")
    assert [(n.checkpoint, n.parent) for n in player.history][-2:] == [("c3", "c2"), ("c4", "c2")]


async def test_the_generator_state_of_each_checkpoint_comes_back_on_rewind() -> None:
    chunks = itertools.count()
    player, _ = await begin(capture=lambda: f"generator@{next(chunks)}".encode())
    await player.choose("wave")
    await player.choose("ask")
    assert (await player.rewind("c2")).generator == b"generator@1"
    assert (await player.rewind("c1")).generator == b"generator@0"
    assert await player.checkpoint(b"later") == "c1"  # the current node's checkpoint, taken again
    assert (await player.rewind("c1")).generator == b"later"


async def test_a_beat_with_a_scripted_plan_runs_it_and_restarts_it_on_rewind() -> None:
    player, realizer = await begin()
    await player.choose("wave")
    await player.choose("ask")
    await player.choose("take_key")
    await player.choose("open")  # the garden ending runs the greeter plan
    garden = tick(realizer, 30)
    assert any(o.speech_start and o.speech_start[0].text == "Hi! Nice to meet you." for o in garden)
    await player.rewind("c4")
    tick(realizer, 3)
    await player.rewind("c5")
    assert tick(realizer, 30) == garden


async def test_without_an_llm_an_intervention_names_the_choices_it_can_take() -> None:
    player, _ = await begin()
    answer = await player.intervene("summon a dragon")
    assert answer.outcome == "unmatched" and player.view().node == "gate"
    assert answer.message == (
        "Without a Director the story can only take its own choices. "
        "Choose one of: wave (Wave at Pip); sneak (Sneak around the back)."
    )
    assert (await player.intervene("sneak")).choice == "sneak"  # by id
    assert (await player.intervene("grab whatever glints in that pot")).choice == "take_key"
    answer = await player.intervene("open the door together")  # trust is 0: only `force` is offered
    assert answer.outcome == "unmatched" and answer.message == (
        "open (Open the door together) needs `has_key and trust >= 2`. "
        "Choose one of: force (Unlock it yourself); give_up (Walk away)."
    )
    await player.choose("give_up")
    answer = await player.intervene("wave")
    assert answer.outcome == "unmatched" and "ended" in answer.message


async def test_bad_requests_get_clear_errors_and_change_nothing() -> None:
    player, _ = await begin()
    with pytest.raises(
        StoryError, match=r"^choice: no choice 'fly' in beat 'gate'; offered: \['wave', 'sneak'\]$"
    ):
        await player.choose("fly")
    await player.choose("sneak")
    await player.choose("take_key")
    with pytest.raises(
        StoryError,
        match=r"^choice: choice 'open' is not available: it needs `has_key and trust >= 2` "
        r"\(now \{'has_key': True, 'trust': 0\}\)$",
    ):
        await player.choose("open")
    with pytest.raises(
        StoryError, match=r"^checkpoint: no checkpoint 'c99'; checkpoints: \['c1', 'c2', 'c3'\]$"
    ):
        await player.rewind("c99")
    with pytest.raises(StoryError, match=r"^text: say what should happen$"):
        await player.intervene("   ")
    await player.choose("force")
    with pytest.raises(StoryError, match=r"^choice: the story has ended \(at 'caught'\); rewind"):
        await player.choose("open")
    assert player.view().checkpoint == "c4" and len(player.history) == 4


async def test_a_restarted_server_continues_from_the_sqlite_file(tmp_path: Path) -> None:
    path = tmp_path / "stories.db"
    store = CheckpointStore(path)
    realizer = Realizer(session="s1")
    player, _ = await begin(store, realizer, capture=lambda: f"chunk {realizer.chunk}".encode())
    tick(realizer, 3)
    await player.choose("wave")
    tick(realizer, 8)
    await player.choose("ask")
    after = tick(realizer, 20)
    await player.rewind("c2")
    await store.close()

    reopened = await CheckpointStore.open(path)
    assert await reopened.sessions() == ["s1"]
    fresh = Realizer(session="s1")
    again, restored = await StoryPlayer.resume(reopened, fresh, session="s1")
    assert restored.view.node == "porch" and restored.view.checkpoint == "c2"
    assert restored.generator == b"chunk 2" and restored.chunk == 2
    assert tree(restored.view) == tree(player.view())
    await again.rewind("c3")
    assert fresh.chunk == 10 and tick(fresh, 20) == after
    with pytest.raises(StoryError, match="no story session 'nobody'"):
        await StoryPlayer.resume(reopened, Realizer(), session="nobody")
    await reopened.close()


async def test_the_richer_story_closes_its_waiting_loop_and_runs_its_scripted_plan() -> None:
    realizer = Realizer(session="s1")
    player = await StoryPlayer.begin(load_story("lighthouse"), realizer, session="s1")
    await player.choose("watch_sea")
    for _ in range(3):
        assert [c.id for c in player.view().choices] == ["keep_watching", "run_back"]
        await player.choose("keep_watching")
    view = player.view()
    assert view.variables["storm"] == 3 and [c.id for c in view.choices] == ["run_back"]
    await player.rewind("c1")
    await player.choose("ask_shelter")  # the kitchen plays the living_room scripted plan
    kitchen = tick(realizer, 12)
    assert any(o.speech_start and o.speech_start[0].text.startswith("Oh, hello!") for o in kitchen)
    assert [c.id for c in player.view().choices] == ["fetch_oil", "sleep"]


async def test_a_scripted_plan_answers_events_only_while_its_beat_is_current() -> None:
    bus = EventBus()
    realizer = Realizer(bus, session="s1")
    player = await StoryPlayer.begin(load_story("garden_gate"), realizer, session="s1", bus=bus)
    for choice in ("wave", "ask", "take_key", "open"):
        await player.choose(choice)  # the garden runs the greeter plan, which waves back

    def script_blocks() -> int:
        return sum(1 for _, source, _ in realizer.blocks() if source == "script")

    stamp = Stamper("s1", prefix="u")
    assert script_blocks() == 0  # the greeter's timeline starts at its first tick
    await bus.publish(stamp(Gesture, gesture="wave"))
    await asyncio.sleep(0.05)
    assert script_blocks() == 1
    await player.rewind("c4")  # the door: no scripted plan, nothing listens any more
    await bus.publish(stamp(Gesture, gesture="thumbs_up"))  # the greeter would jump for joy
    await asyncio.sleep(0.05)
    assert script_blocks() == 0
    await player.close()


async def test_a_story_sets_the_scene_on_entering_a_beat_and_by_a_choice_and_a_rewind_takes_it_back() -> None:
    world = build_manifest(scene=True)
    realizer = Realizer(session="s1", manifest=world)
    player = await StoryPlayer.begin(load_story("stormy_night"), realizer, session="s1", manifest=world)
    assert dict(tick(realizer, 2)[-1].condition.scene) == {
        "light": "dusk",
        "lamp": "off",
        "door": "closed",
        "prop": "ball",
    }
    await player.choose("wait")
    stormy = dict(tick(realizer, 2)[-1].condition.scene)
    assert (stormy["light"], stormy["weather"], stormy["lamp"], stormy["door"]) == (
        "night",
        "rain",
        "on",
        "closed",
    )
    await player.choose("open")  # the choice opens the door as the last beat is entered
    assert dict(tick(realizer, 2)[-1].condition.scene)["door"] == "open"
    await player.rewind("c1")
    assert dict(tick(realizer, 2)[-1].condition.scene) == {
        "light": "dusk",
        "lamp": "off",
        "door": "closed",
        "prop": "ball",
    }
