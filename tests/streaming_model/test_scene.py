"""The world's scene: today's world unchanged, changes that fade in over frames and then hold, a door that
waits for the character, and a ball that is carried, thrown and stays where it lands."""

from __future__ import annotations

import numpy as np
import pytest

from streaming_model.condition import ChunkCondition, ConditionError, encode, phases
from streaming_model.manifest import ACTION_INDEX, SCENE, SCENE_ACTIONS, build_manifest
from streaming_model.world.episodes import Episode, random_codes, random_episode, simulate
from streaming_model.world.palette import SKY
from streaming_model.world.scene import BALL_HOME, DOOR_STAND_X
from streaming_model.world.scenery import draw_background, part_cover
from streaming_model.world.state import initial_state

WORLD = build_manifest(scene=True)


def world(conds: list[ChunkCondition], identity: int = 0) -> Episode:
    return simulate(encode(conds, phases(conds), WORLD), np.array([identity]))


def held(action: str, chunks: int, **scene: str) -> list[ChunkCondition]:
    return [ChunkCondition(action, scene=tuple(scene.items()))] * chunks


def test_the_default_scene_draws_todays_world_exactly() -> None:
    rng = np.random.default_rng(4)
    codes = random_codes(rng, 3, 8)
    identity = np.array([0, 3, 5])
    plain = simulate(codes, identity)
    codes.scene = np.zeros((3, 8, len(SCENE)), np.int64)  # every part named, at its default
    assert np.array_equal(simulate(codes, identity).frames, plain.frames)
    assert (plain.frames[:, :, :8] == np.round(SKY).astype(np.uint8)).all()  # nothing above the character


def test_the_shipped_models_vocabulary_has_no_scene_and_refuses_one() -> None:
    assert build_manifest().scene == () and "pick_up" not in [a.name for a in build_manifest().actions]
    with pytest.raises(ConditionError, match="this model draws no scene"):
        ChunkCondition(scene=(("light", "night"),)).validate()
    with pytest.raises(ConditionError, match="unknown action"):
        ChunkCondition("pick_up").validate()
    ChunkCondition("pick_up", scene=(("light", "night"),)).validate(WORLD)


def test_a_scene_names_known_choices_each_part_once() -> None:
    with pytest.raises(ConditionError, match="weather must be one of"):
        ChunkCondition(scene=(("weather", "hail"),)).validate(WORLD)
    with pytest.raises(ConditionError, match="named twice"):
        ChunkCondition(scene=(("light", "day"), ("light", "night"))).validate(WORLD)
    with pytest.raises(ConditionError, match="unknown scene part"):
        ChunkCondition(scene=(("sky", "blue"),)).validate(WORLD)


def test_a_light_fades_over_about_a_second_and_then_holds() -> None:
    ep = world(held("idle", 2) + held("idle", 16, light="night"))
    red = ep.truth["light"][0, :, 0]
    after = red[8:]
    assert red[7] == 1.0 and 0.9 < after[0] < 1.0  # the change starts at once, without a cut
    assert (np.diff(after) <= 0).all()
    assert (
        abs(after[24] - 0.30) > 0.02 and abs(after[-1] - 0.30) < 0.01
    )  # a second on, still fading; then there


def test_rain_sets_in_over_frames_and_clears_again() -> None:
    ep = world(held("idle", 1) + held("idle", 12, weather="rain") + held("idle", 12))
    rain = ep.truth["rain"][0]
    assert 0 < rain[4] <= 0.1 and rain[4 + 47] == 1.0
    assert (np.diff(rain[4:52]) >= 0).all() and (np.diff(rain[52:]) <= 0).all() and rain[-1] < 0.1


def test_a_door_opening_waits_for_the_character_to_arrive_then_swings_and_stays_open() -> None:
    conds = held("idle", 2, door="closed") + held("open_door", 14, door="open") + held("idle", 6, door="open")
    ep = world(conds)
    x, door = ep.truth["x"][0], ep.truth["door_open"][0]
    arrived = int(np.argmax(np.abs(x - DOOR_STAND_X) < 1.0))
    assert arrived > 8 + 12 and (door[:arrived] == 0).all()  # walked there first (from the centre)
    assert 0 < door[arrived + 1] < 0.5 and door[arrived + 24] > 0.9 and door[-1] > 0.99


def test_a_ball_is_picked_up_carried_thrown_and_stays_where_it_lands() -> None:
    conds = (
        held("idle", 2, prop="ball")
        + held("pick_up", 10, prop="ball")
        + held("walk_right", 6, prop="ball")
        + [ChunkCondition("turn", side="left", scene=(("prop", "ball"),))] * 3
        + held("throw", 4, prop="ball")
        + held("idle", 20, prop="ball")
    )
    t = world(conds).truth
    assert t["held"][0, 4 * 12 - 1] == 1.0 and t["ball_x"][0, 0] == BALL_HOME
    walking = slice(4 * 12, 4 * 18)
    assert (t["held"][0, walking] == 1.0).all() and (t["x"][0, walking][-1] - t["x"][0, walking][0]) > 20
    assert np.abs(t["ball_x"][0, walking] - t["x"][0, walking]).max() < 14  # carried along
    thrown = slice(4 * 21, None)
    assert t["held"][0, thrown][-1] == 0.0 and t["ball_y"][0, thrown].max() > 30  # it flew
    rest = t["ball_x"][0, -24:]
    assert (rest == rest[0]).all() and (t["ball_y"][0, -24:] == 0).all()  # and stays where it landed
    assert abs(rest[0] - t["x"][0, -1]) > 20


def test_putting_down_leaves_the_ball_at_the_feet() -> None:
    conds = (
        held("pick_up", 10, prop="ball")
        + held("put_down", 6, prop="ball")
        + held("walk_right", 6, prop="ball")
    )
    t = world(conds).truth
    assert t["held"][0, 4 * 10 - 1] == 1.0 and t["held"][0, 4 * 16 - 1] == 0.0
    assert (t["ball_x"][0, 4 * 16 :] == t["ball_x"][0, 4 * 16]).all()  # left behind when walking on


def test_the_next_chunk_depends_only_on_state_and_condition_with_a_scene() -> None:
    codes = random_codes(np.random.default_rng(9), 2, 12, scene=True)
    identity = np.array([1, 4])
    whole = simulate(codes, identity)
    state = initial_state(identity)
    first = simulate(codes.window(0, 7), identity, state=state)
    rest = simulate(codes.window(7, 12), identity, state=state)
    assert np.array_equal(np.concatenate([first.frames, rest.frames], axis=1), whole.frames)


def test_random_scene_episodes_show_every_choice_and_every_action_toward_the_scene() -> None:
    codes = random_codes(np.random.default_rng(0), 40, 60, scene=True)
    assert codes.scene is not None
    for p, spec in enumerate(SCENE):
        assert set(np.unique(codes.scene[..., p])) == set(range(len(spec.choices))), spec.name
    assert {ACTION_INDEX[a.name] for a in SCENE_ACTIONS} <= set(np.unique(codes.action))
    door = [s.name for s in SCENE].index("door")
    opening = codes.action == ACTION_INDEX["open_door"]
    assert (codes.scene[..., door][opening] == 2).all()  # the scene agrees with the action


def test_the_character_stands_idle_through_about_half_of_the_scenes_own_changes() -> None:
    codes = random_codes(np.random.default_rng(0), 40, 60, scene=True)
    assert codes.scene is not None
    changed = (codes.scene[:, 1:] != codes.scene[:, :-1]).any(-1)
    at = codes.action[:, 1:][changed]  # the action at each change's first chunk
    made = np.isin(at, [ACTION_INDEX[a.name] for a in SCENE_ACTIONS if a.sets])  # changes an action makes
    idle = at[~made] == ACTION_INDEX["idle"]
    assert 0.35 < idle.mean() < 0.75  # drawn independently of the scene, about 5 % would be
    # Phases are what the runtime counts: 0 where the action changes, else on by a chunk's frames.
    same = codes.action[:, 1:] == codes.action[:, :-1]
    assert (codes.phase0[:, 0] == 0).all()
    assert np.array_equal(codes.phase0[:, 1:], np.where(same, codes.phase0[:, :-1] + 4, 0))


def test_scene_episodes_are_reproducible() -> None:
    a, b = random_episode(2, 2, 6, scene=True), random_episode(2, 2, 6, scene=True)
    assert np.array_equal(a.frames, b.frames) and a.codes.scene is not None


def test_the_parts_cover_is_exactly_where_the_lamp_and_the_door_are_drawn() -> None:
    s = initial_state(np.zeros(4, np.int64))
    s.lamp_show[:] = [1.0, 0.4, 0.0, 0.0]  # standing, rising from the floor, gone
    s.door_show[:] = [0.0, 1.0, 0.3, 0.0]
    s.door_open[:] = [0.0, 0.5, 1.0, 0.0]
    base = np.full((128, 128, 3), -1.0, np.float32)  # no colour the scene paints
    drawn = (draw_background(s, base) != base).any(-1)
    cover = part_cover(s.lamp_show, s.door_show)
    assert np.array_equal(cover, drawn)
    assert cover[0].any() and cover[1].sum() > cover[2].sum() > 0 and not cover[3].any()
    # An object rising from the floor shows its lowest rows first.
    rows = np.flatnonzero(cover[2].any(-1))
    assert rows.max() == 107 and rows.min() > 34
