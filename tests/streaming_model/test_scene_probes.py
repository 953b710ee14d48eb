"""The scene probes read rendered truth: every light, lamp, weather, door and ball choice once it has
settled, the ball in the paw or on the floor, every action toward the scene, and the same from frames as a
client receives them (JPEG)."""

from __future__ import annotations

import collections
import io
import warnings

import numpy as np
import pytest
from PIL import Image

from streaming_model.condition import ChunkCodes, ChunkCondition, encode, phases
from streaming_model.manifest import ACTION_NAMES, SCENE, WORLD_ACTION_NAMES, build_manifest
from streaming_model.probes import Measures, _slice, action_shown, measure, measure_with_scene
from streaming_model.scene_probes import (
    SceneMeasures,
    ball_held,
    light_shown,
    measure_scene,
    scene_action_shown,
    weather_shown,
)
from streaming_model.world.episodes import Episode, random_episode, simulate

WORLD = build_manifest(scene=True)
SETTLE = 16  # chunks a choice is held before it is read (the slowest fade, light, takes about 60 frames)


def _settled_scenes() -> tuple[Episode, list[dict[str, str]]]:
    """Every choice of every part, each with three random choices of the other parts, held for SETTLE
    chunks, two identities in turn: one batch of worlds."""
    rng = np.random.default_rng(1)
    scenes = []
    for spec in SCENE:
        for choice in spec.choices:
            for _ in range(3):
                scene = {s.name: str(rng.choice(s.choices)) for s in SCENE}
                scenes.append({**scene, spec.name: choice})
    codes = []
    for scene in scenes:
        conds = [ChunkCondition(scene=tuple(scene.items()))] * SETTLE
        codes.append(encode(conds, phases(conds), WORLD))
    batch = ChunkCodes(**{k: np.concatenate([getattr(c, k) for c in codes]) for k in vars(codes[0])})
    return simulate(batch, np.arange(len(scenes)) % 2 * 3), scenes


@pytest.fixture(scope="module")
def settled() -> tuple[Episode, list[dict[str, str]], SceneMeasures]:
    ep, scenes = _settled_scenes()
    return ep, scenes, measure_scene(ep.frames[:, -8:])


def test_every_light_is_read_once_it_has_settled(settled: tuple) -> None:
    _, scenes, m = settled
    for i, scene in enumerate(scenes):
        frames = SceneMeasures(**{k: v[i] for k, v in vars(m).items()})
        assert light_shown(frames, scene["light"], scene["lamp"]).all(), scene


def test_the_lamp_is_read_there_or_not_and_on_or_off(settled: tuple) -> None:
    _, scenes, m = settled
    for i, scene in enumerate(scenes):
        assert (m.lamp_shown[i] == (scene["lamp"] != "none")).all(), scene
        assert (m.lamp_on[i] == (scene["lamp"] == "on")).all(), scene


def test_rain_and_snow_are_told_apart_and_from_a_clear_sky(settled: tuple) -> None:
    _, scenes, m = settled
    choices = next(s.choices for s in SCENE if s.name == "weather")
    for i, scene in enumerate(scenes):
        assert (weather_shown(m)[i] == choices.index(scene["weather"])).all(), scene


def test_the_door_is_read_there_or_not_and_open_or_closed(settled: tuple) -> None:
    _, scenes, m = settled
    for i, scene in enumerate(scenes):
        assert (m.door_shown[i] == (scene["door"] != "none")).all(), scene
        if scene["door"] != "none":
            assert ((m.door_open[i] > 0.9) == (scene["door"] == "open")).all(), scene
            assert ((m.door_open[i] < 0.1) == (scene["door"] == "closed")).all(), scene


def test_the_ball_is_read_where_it_lies(settled: tuple) -> None:
    ep, scenes, m = settled
    for i, scene in enumerate(scenes):
        assert (m.ball_shown[i] == (scene["prop"] == "ball")).all(), scene
        if scene["prop"] == "ball":
            assert np.abs(m.ball_x[i] - ep.truth["ball_x"][i, -8:]).max() < 1.0
            assert np.abs(m.ball_y[i] - (108 - 5 - ep.truth["ball_y"][i, -8:])).max() < 1.0


@pytest.fixture(scope="module")
def scene_episode() -> tuple[Episode, list[tuple[Measures, SceneMeasures]]]:
    """Random worlds in a changing scene, with what the probes read of each."""
    ep = random_episode(5, 16, 48, scene=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        read = [measure_with_scene(ep.frames[i], int(ep.identity[i])) for i in range(16)]
    return ep, read


def test_measuring_with_the_scene_reads_what_the_two_probes_read_apart(scene_episode: tuple) -> None:
    ep, read = scene_episode
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        apart = measure(ep.frames[0], int(ep.identity[0])), measure_scene(ep.frames[0])
    for together, alone in zip(read[0], apart, strict=True):
        for name, value in vars(alone).items():
            assert np.array_equal(getattr(together, name), value, equal_nan=True), name


def test_the_ball_in_the_paw_is_told_from_the_ball_on_the_floor(scene_episode: tuple) -> None:
    ep, read = scene_episode
    for i, (m, sm) in enumerate(read):
        truth = ep.truth["held"][i]
        shown = ep.truth["ball_show"][i] == 1.0
        settled = shown & ((truth == 0.0) | (truth == 1.0)) & (ep.truth["ball_y"][i] == 0.0)
        assert (ball_held(m, sm) == (truth == 1.0))[settled].all()


def test_every_action_is_recognised_from_truth_frames_in_a_changing_scene(scene_episode: tuple) -> None:
    ep, read = scene_episode
    names = WORLD_ACTION_NAMES
    verdicts = collections.defaultdict(list)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, (m, sm) in enumerate(read):
            a = ep.codes.action[i]
            starts = [0, *(np.flatnonzero(np.diff(a)) + 1)]
            for s, e in zip(starts, [*starts[1:], len(a)], strict=True):
                if e - s < 3:
                    continue
                name, frames = names[a[s]], slice(4 * s, 4 * e)
                if name in ACTION_NAMES:
                    side = {-1.0: "left", 0.0: "other", 1.0: "right"}[float(ep.codes.side[i, s])]
                    paw = "left" if side == "left" else "right"
                    target = float(ep.codes.target[i, s, 0])
                    ok = action_shown(
                        name, _slice(m, frames), paw, target, side if name == "turn" else "other"
                    )
                else:
                    part = SceneMeasures(**{k: v[frames] for k, v in vars(sm).items()})
                    ok = scene_action_shown(name, _slice(m, frames), part)
                verdicts[name].append(ok)
    assert set(verdicts) == set(names)
    for name, v in verdicts.items():
        assert np.mean(v) == 1.0, f"{name}: {np.mean(v):.2f} of {len(v)} segments"


def test_the_scene_is_read_the_same_from_jpeg_coded_frames(settled: tuple) -> None:
    ep, _, raw = settled

    def jpeg(frame: np.ndarray) -> np.ndarray:
        buf = io.BytesIO()
        Image.fromarray(frame).save(buf, format="JPEG", quality=85)
        return np.asarray(Image.open(buf).convert("RGB"))

    coded = measure_scene(np.stack([[jpeg(f) for f in world[-8:]] for world in ep.frames]))
    assert np.abs(coded.light - raw.light).max() < 0.03
    for name in ("lamp_shown", "lamp_on", "door_shown", "ball_shown"):
        assert (getattr(coded, name) == getattr(raw, name)).all(), name
    assert (weather_shown(coded) == weather_shown(raw)).all()
    doors = raw.door_shown
    assert np.abs(coded.door_open[doors] - raw.door_open[doors]).max() < 0.15
    balls = raw.ball_shown
    assert np.abs(coded.ball_x[balls] - raw.ball_x[balls]).max() < 1.5
