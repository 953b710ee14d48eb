"""Training inputs: token masks find the character and its face; noise levels favour the sampler's; scene
shards feed a transformer grown to read the scene, whose changes are onsets like an action's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from streaming_model.condition import SCENE_DIM
from streaming_model.dit import with_scene
from streaming_model.loading import load_codec, load_dit
from streaming_model.manifest import SCENE
from streaming_model.train.dit_batches import ONSET_WEIGHT, SEQ, Batcher, Shards, sample_levels
from streaming_model.train.dit_data import build_shard, face_mask, parts_mask, token_mask
from streaming_model.train.dit_train import loss_on
from streaming_model.world.episodes import Episode, reference_chunk
from tests.support.shard_arrays import night_falls


def test_face_tokens_are_character_tokens_around_the_head() -> None:
    chunk = reference_chunk(np.array([2]))[0]  # character centred at x = 64, head around y = 46
    char, face = token_mask(chunk), face_mask(chunk)
    assert face.any() and (char | ~face).all()  # the face is part of the character
    rows = np.flatnonzero(face) // 8
    cols = np.flatnonzero(face) % 8
    assert set(rows) <= {2, 3} and set(cols) <= {3, 4}  # 16-pixel tokens around (64, 46)
    assert 0.1 < char.mean() < 0.4


def test_at_night_in_the_rain_the_masks_still_find_the_character_and_its_face_not_the_scene(
    night_rain: Episode,
) -> None:
    ep = night_rain
    assert ep.scenery is not None
    last = slice(-4, None)  # the light has settled
    chunk, alone, light = ep.frames[0, last], ep.scenery[0, last], ep.truth["light"][0, last]
    assert (light < 0.6).all()  # night
    char = token_mask(chunk, alone)
    face = face_mask(chunk, light)
    assert face.any() and (char | ~face).all()
    assert 0.1 < char.mean() < 0.4  # as in daylight: the character's tokens, not the rain or the door
    assert token_mask(chunk).mean() > 0.9  # against today's background every token would count


def test_noise_levels_concentrate_on_the_two_step_samplers_levels() -> None:
    t = sample_levels(torch.Generator().manual_seed(0), (20_000,))
    assert 0.3 < (t == 1.0).float().mean() < 0.4
    assert 0.2 < (t == 0.5).float().mean() < 0.3
    assert (t > 0.5).float().mean() > 0.5  # weighted toward high noise
    assert t.min() >= 0.02 and t.max() <= 1.0


def test_scene_shards_keep_their_scene_and_a_grown_transformer_trains_on_them(tmp_path: Path) -> None:
    codec = load_codec()
    for folder in ("scene", "plain"):
        (tmp_path / folder).mkdir()
    for i in range(2):
        build_shard(codec, 9_000 + i, 2, SEQ + 2, tmp_path / "scene" / f"shard_{i:04d}.npz", scene=True)
    build_shard(codec, 7_000, 1, SEQ + 2, tmp_path / "plain" / "shard_0000.npz")
    shards = Shards(tmp_path / "scene", plain=tmp_path / "plain")
    assert shards.train["scene"].shape == (3, SEQ + 2, len(SCENE))  # a choice per scene part
    assert shards.train["scene"][:2].any() and not shards.train["scene"][2].any()  # today's world: defaults
    assert shards.train["parts"].shape == (3, SEQ + 2, 64) and not shards.train["parts"][2].any()
    model = with_scene(load_dit()[0])
    batcher = Batcher(model.cfg, shards.train, shards.reference)
    batch = batcher.batch(torch.Generator().manual_seed(0), 2)
    loss = loss_on(model, batch, batcher.mask)
    loss.backward()
    # The scene's inputs start at zero weight and get a gradient: training can learn them.
    first = model.cont_mlp[0]
    assert isinstance(first, torch.nn.Linear)
    grad = first.weight.grad
    assert grad is not None and torch.isfinite(loss) and grad[:, -SCENE_DIM:].abs().sum() > 0
    # So do the condition maps, which start at zero too.
    assert model.maps.grad is not None and model.maps.grad.abs().sum() > 0


def test_a_change_of_scene_is_an_onset_with_its_own_share_weighed_up_as_an_actions_first_chunks() -> None:
    cfg = with_scene(load_dit()[0]).cfg
    batcher = Batcher(
        cfg, night_falls(), np.zeros((8, 16, 16, 16), np.float32), ("turn",), 0.5, change_prob=0.5
    )
    assert batcher.changes.tolist() == [[0, 10]]  # the change: an onset of its own kind
    assert batcher.focus_prob == 0.0 and not len(batcher.onsets)  # no turn here: its share goes unused
    assert batcher.after_change[0].nonzero()[0].tolist() == [10, 11, 12]
    gen = torch.Generator().manual_seed(0)
    batches = [batcher.batch(gen, 4) for _ in range(8)]
    weights = [b["weight"][..., 0] for b in batches if b["pos"][1] > 1]  # mid-episode sequences
    placed = [(w.amax(1) == 1 + ONSET_WEIGHT) for w in weights]  # those around the change
    assert weights and 0 < sum(int(p.sum()) for p in placed) < 4 * len(weights)  # about half of them


def test_with_a_change_weight_the_tokens_a_change_of_scene_moved_weigh_more_in_its_first_chunks() -> None:
    data = night_falls()
    data["latents"][0, 10:, :, 14:, 14:] = 2.0  # from chunk 10 on, the bottom right corner (one token) is lit
    cfg = with_scene(load_dit()[0]).cfg
    ref = np.zeros((8, 16, 16, 16), np.float32)
    plain = Batcher(cfg, data, ref, change_prob=1.0)  # sequences placed on the change
    weighed = Batcher(cfg, data, ref, change_prob=1.0, change_weight=8.0)
    ep, start = np.array([0]), np.array([8])  # chunks 8..8+SEQ: the change at the third
    x0 = torch.from_numpy(data["latents"][ep[:, None], start[:, None] + np.arange(SEQ)].astype(np.float32))
    moved = weighed.changed_tokens(ep, start, x0)[0]
    corner = 63  # the last token of the 8 x 8 grid
    assert moved[2, corner] == 1.0 and moved[2].sum() == 1.0  # the corner moved, nothing else
    assert not moved[3:].any() and not moved[:2].any()  # it moves once: after that it stays lit
    # The extra weight lands on that token of the change's chunk, and only with a change weight.
    gen_a, gen_b = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    with_w = torch.cat([weighed.batch(gen_a, 16)["weight"] for _ in range(4)])  # a quarter start episodes
    without = torch.cat([plain.batch(gen_b, 16)["weight"] for _ in range(4)])
    extra = with_w - without
    assert extra.min() == 0.0 and extra.max() > 0.0
    assert (extra.sum((0, 1)) > 0).nonzero().flatten().tolist() == [corner]


def test_the_parts_mask_holds_the_tokens_of_the_lamp_and_the_door_while_they_show() -> None:
    shows = np.zeros((3, 4))
    shows[1] = 1.0  # standing through the chunk
    shows[2, 3] = 0.2  # rising from the floor in its last frame
    lamp = parts_mask(shows, np.zeros((3, 4)))
    door = parts_mask(np.zeros((3, 4)), shows)
    assert not lamp[0].any() and not door[0].any()
    assert set(np.flatnonzero(lamp[1]) % 8) == {0}  # the lamp stands at the left
    assert set(np.flatnonzero(door[1]) % 8) == {6, 7}  # the door at the right
    assert 0 < door[2].sum() < door[1].sum()  # its lowest tokens first


def test_with_a_part_weight_the_lamps_and_the_doors_tokens_weigh_more_wherever_they_show() -> None:
    data = night_falls()
    data["parts"][0, 10:, 63] = True  # from chunk 10 on, something stands in the bottom right token
    cfg = with_scene(load_dit()[0]).cfg
    ref = np.zeros((8, 16, 16, 16), np.float32)
    gen_a, gen_b = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    weighed = Batcher(cfg, data, ref, part_weight=4.0)
    with_w = torch.cat([weighed.batch(gen_a, 16)["weight"] for _ in range(4)])
    without = torch.cat([Batcher(cfg, data, ref).batch(gen_b, 16)["weight"] for _ in range(4)])
    extra = with_w - without
    assert extra.min() == 0.0 and extra.max() > 0.0
    assert (extra.sum((0, 1)) > 0).nonzero().flatten().tolist() == [63]
    del data["parts"]
    with pytest.raises(ValueError, match="rebuild them"):
        Batcher(cfg, data, ref, part_weight=4.0)
