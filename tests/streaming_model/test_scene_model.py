"""The transformer grown to read the scene starts exactly where the shipped one is: same frames for today's
world, the scene and its actions accepted, where the shipped model refuses them; written to a file, the
tiny backend serves it and publishes the scene."""

from __future__ import annotations

from pathlib import Path

import msgspec
import numpy as np
import pytest

from streaming_model.backends import open_backend
from streaming_model.condition import ChunkCondition, ConditionError
from streaming_model.dit import DiT, grown_for_scene, with_scene
from streaming_model.loading import load_codec, load_dit
from streaming_model.manifest import SCENE_ACTIONS
from streaming_model.runtime import Generator
from streaming_model.train.dit_train import export


@pytest.fixture(scope="module")
def generators() -> tuple[Generator, Generator]:
    dit, _ = load_dit()
    codec = load_codec()
    return Generator(dit, codec), Generator(with_scene(dit), load_codec())


def test_the_grown_transformer_draws_todays_world_exactly_as_the_shipped_one(generators: tuple) -> None:
    shipped, grown = generators
    conds = [ChunkCondition("wave"), ChunkCondition("walk_right"), ChunkCondition("nod", emotion="happy")] * 2
    a, b = shipped.open_session(identity=2, seed=7), grown.open_session(identity=2, seed=7)
    for c in conds:
        assert np.array_equal(a.step(c), b.step(c))


def test_only_the_grown_transformer_takes_the_scene_and_its_actions(generators: tuple) -> None:
    shipped, grown = generators
    assert shipped.vocabulary.scene == () and shipped.dit.cfg.scene_dim == 0
    assert [s.name for s in grown.vocabulary.scene] == ["light", "lamp", "weather", "door", "prop"]
    night = ChunkCondition("pick_up", scene=(("light", "night"), ("prop", "ball")))
    with pytest.raises(ConditionError):
        shipped.open_session(identity=0).step(night)
    frames = grown.open_session(identity=0).step(night)
    assert frames.shape == (4, 128, 128, 3)
    assert {a.name for a in SCENE_ACTIONS} <= {a.name for a in grown.vocabulary.actions}


def test_a_transformer_that_reads_the_scene_is_not_grown_again(generators: tuple) -> None:
    with pytest.raises(ValueError, match="reads the scene already"):
        with_scene(generators[1].dit)
    assert grown_for_scene(generators[1].dit) is generators[1].dit


def test_a_scene_model_without_condition_maps_gets_them_and_draws_exactly_as_before(
    generators: tuple,
) -> None:
    grown = generators[1].dit
    earlier = DiT(msgspec.structs.replace(grown.cfg, cond_maps=0))  # as a run before the maps exported it
    earlier.load_state_dict({k: v for k, v in grown.state_dict().items() if "map" not in k})
    mapped = grown_for_scene(earlier.eval())
    assert mapped.cfg.cond_maps > 0 and not mapped.maps.any()
    night = ChunkCondition("idle", scene=(("light", "night"), ("door", "open")))
    a = Generator(earlier, load_codec()).open_session(identity=3, seed=1)
    b = Generator(mapped.eval(), load_codec()).open_session(identity=3, seed=1)
    for _ in range(3):
        assert np.array_equal(a.step(night), b.step(night))


def test_the_tiny_backend_serves_other_weights_and_publishes_their_scene(tmp_path: Path) -> None:
    path = tmp_path / "dit.safetensors"
    export(with_scene(load_dit()[0]), step=0, minutes=0.0, val_log=[], path=path)
    backend = open_backend("tiny", {"dit": str(path), "max_batch": "1"})
    assert [s.name for s in backend.manifest.vocabulary.scene] == ["light", "lamp", "weather", "door", "prop"]
    session = backend.open_session(identity=1)
    pending = session.generate(ChunkCondition("open_door", scene=(("door", "closed"),)))
    assert pending is not None and session.decode(pending).shape == (4, 128, 128, 3)
    assert open_backend("tiny", {"max_batch": "1"}).manifest.vocabulary.scene == ()
