"""Plans change the scene: a ``set_scene`` behavior holds its choices in every later condition, an action
that sets part of the scene leaves it set, a re-decision or a restore gives the scene back as it was, and
the Director's ``set_scene`` tool is offered only to a model that draws a scene."""

from __future__ import annotations

import asyncio
import json

import msgspec
import pytest

from agent.idle import IdleConfig, IdleVariety
from agent.plan_checks import validate_block
from agent.plans import Action, Block, PlanError, SetScene, SyncRef, Wait
from agent.realizer import Realizer, RealizerSnapshot, RealizerState
from agent.tooling import ToolContext
from streaming_model.manifest import build_manifest
from tools.character import build_toolbox

WORLD = build_manifest(scene=True)
TINY = build_manifest()


def realizer() -> Realizer:
    return Realizer(manifest=WORLD, idle=IdleVariety(IdleConfig(seed=3)))


def night_in(seconds: float, **changes: str) -> Block:
    """A block that sets the scene (night unless told other changes) ``seconds`` from its start."""
    scene = SetScene(changes=changes or {"light": "night"})
    if seconds == 0:
        return Block(source="script", behaviors=[scene])
    wait = Wait(id="w", duration_s=seconds)
    return Block(
        source="script", behaviors=[wait, msgspec.structs.replace(scene, start=SyncRef(to="w", point="end"))]
    )


def test_a_scene_change_is_checked_against_the_models_scene() -> None:
    validate_block(night_in(0.5, light="night", weather="rain"), WORLD)
    with pytest.raises(PlanError, match="this model draws no scene"):
        validate_block(night_in(0.5), TINY)
    with pytest.raises(PlanError, match="weather must be one of") as bad:
        validate_block(night_in(0.5, weather="hail"), WORLD)
    assert bad.value.field.endswith("changes.weather")
    with pytest.raises(PlanError, match="unknown scene part"):
        validate_block(night_in(0.5, sky="green"), WORLD)


def test_the_scene_set_holds_in_every_later_chunk() -> None:
    r = realizer()
    r.submit(night_in(1.0, light="night", door="closed"))
    outputs = [r.tick(k) for k in range(30)]
    assert all(o.condition.scene == () for o in outputs[:6])  # one second in, at 6 chunks a second
    assert all(o.condition.scene == (("light", "night"), ("door", "closed")) for o in outputs[6:])


def test_a_re_decided_chunk_changes_the_scene_once_and_a_discarded_one_not_at_all() -> None:
    r = realizer()
    r.submit(night_in(0.0))
    assert r.tick(0).condition.scene == r.tick(0).condition.scene == (("light", "night"),)
    r.tick(1)
    r.submit(night_in(0.0, light="day"))
    r.discard(r.propose(1))
    assert r.scene == {"light": "night"}


def test_an_action_that_sets_the_scene_leaves_it_set_after_it_ends() -> None:
    r = realizer()
    r.submit(Block(source="script", behaviors=[Action(name="open_door", duration_s=1.0)]))
    outputs = [r.tick(k) for k in range(20)]
    assert outputs[0].condition.action == "open_door" and outputs[0].condition.scene == (("door", "open"),)
    assert outputs[-1].condition.action != "open_door"
    assert dict(outputs[-1].condition.scene) == {"door": "open"}


def test_a_restore_brings_the_earlier_scene_back() -> None:
    r = realizer()
    r.tick(0)
    saved = r.snapshot()
    r.submit(night_in(0.0, weather="snow"))
    assert dict(r.tick(1).condition.scene) == {"weather": "snow"}
    r.restore(saved)
    assert r.tick(1).condition.scene == ()


def test_the_scene_travels_in_the_realizers_state_and_old_states_have_none() -> None:
    r = realizer()
    r.submit(night_in(0.0, prop="ball"))
    r.tick(0)
    data = msgspec.json.encode(r.state())
    again = Realizer(manifest=WORLD)
    again.restore(RealizerSnapshot.from_state(msgspec.json.decode(data, type=RealizerState)))
    assert dict(again.tick(1).condition.scene) == {"prop": "ball"}
    old = msgspec.json.decode(data)
    del old["scene"], old["scene_before"]
    assert msgspec.convert(old, RealizerState).scene == {}


def test_the_director_can_set_the_scene_only_where_the_model_draws_one() -> None:
    assert "set_scene" not in build_toolbox(TINY).names
    box = build_toolbox(WORLD)
    r = realizer()
    ctx = ToolContext(submit=r.submit)
    result = asyncio.run(box.call("set_scene", json.dumps({"light": "dusk", "weather": "rain"}), ctx))
    assert result.ok
    assert dict(r.tick(0).condition.scene) == {"light": "dusk", "weather": "rain"}
    empty = asyncio.run(box.call("set_scene", "{}", ctx))
    assert not empty.ok and "at least one part" in (empty.error or "")
    wrong = asyncio.run(box.call("set_scene", json.dumps({"weather": "hail"}), ctx))
    assert not wrong.ok


def test_two_scene_changes_due_in_one_chunk_both_apply() -> None:
    r = realizer()
    r.submit(night_in(0.0, light="night"))
    r.submit(Block(source="director", priority=5, behaviors=[SetScene(changes={"weather": "snow"})]))
    assert dict(r.tick(0).condition.scene) == {"light": "night", "weather": "snow"}
