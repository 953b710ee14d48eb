"""The scene evaluation scores the world's truth at 100 %, and it can fail: a transformer grown to read the
scene but not trained on it draws today's world whatever it is asked, and scores 0 on every change; the
world through a codec is the ceiling of a model decoded by it, and the shipped codec's is below the world's."""

from __future__ import annotations

import pytest

from streaming_model.condition import ConditionError
from streaming_model.dit import with_scene
from streaming_model.evaluate import codec_draw, world_draw
from streaming_model.loading import load_codec, load_dit
from streaming_model.manifest import SCENE, SCENE_ACTIONS
from streaming_model.runtime import Generator
from streaming_model.scene_evaluate import model_draw, run_scene


def test_the_world_shows_every_choice_and_action_of_the_scene() -> None:
    figures = run_scene(world_draw, range(1))
    names = {f"{s.name}={c}" for s in SCENE for c in s.choices} | {a.name for a in SCENE_ACTIONS}
    assert names <= set(figures)
    assert all(v == 1.0 for v in figures.values()), figures


def test_a_transformer_not_trained_on_the_scene_fails_it_and_the_shipped_one_refuses_it() -> None:
    dit, _ = load_dit()
    grown = Generator(with_scene(dit), load_codec())
    figures = run_scene(model_draw(grown, steps=1), range(1))
    changes = [f"{s.name}={c}" for s in SCENE for c in s.choices[1:]]
    assert all(figures[name] == 0.0 for name in changes), figures
    assert figures["put_down"] == 0.0 and figures["throw"] == 0.0  # never held a ball to put down
    with pytest.raises(ConditionError, match="this model draws no scene"):
        run_scene(model_draw(Generator(dit, load_codec()), steps=1), range(1))


def test_through_the_shipped_codec_the_scene_is_lost_in_part_the_ceiling_a_model_decoded_by_it_has() -> None:
    figures = run_scene(codec_draw(load_codec()), range(1))
    assert figures["door=closed"] == 1.0 and figures["lamp=off"] == 1.0  # large dark shapes pass
    lost = [name for name, v in figures.items() if v == 0.0]
    assert {"weather=snow", "light=night", "prop=ball"} <= set(lost), figures  # never seen by it
