"""The procedural world: deterministic, renders the body parts, random conditions are plausible."""

from __future__ import annotations

import numpy as np

from streaming_model.condition import ChunkCondition, encode, phases
from streaming_model.manifest import ACTION_NAMES
from streaming_model.world.episodes import random_codes, random_episode, reference_chunk, simulate
from streaming_model.world.palette import NUM_IDENTITIES, SKY
from streaming_model.world.state import initial_state


def test_same_conditions_give_identical_frames() -> None:
    a = random_episode(3, 2, 6)
    b = random_episode(3, 2, 6)
    assert np.array_equal(a.frames, b.frames)


def test_next_chunk_depends_only_on_state_and_condition() -> None:
    # Splitting an episode at a chunk boundary and continuing from the saved state gives the same frames.
    rng = np.random.default_rng(0)
    codes = random_codes(rng, 2, 8)
    identity = np.array([0, 4])
    whole = simulate(codes, identity)
    state = initial_state(identity)
    first = simulate(codes.window(0, 5), identity, state=state)  # advances state in place
    rest = simulate(codes.window(5, 8), identity, state=state)
    assert np.array_equal(np.concatenate([first.frames, rest.frames], axis=1), whole.frames)


def test_frames_show_a_character_on_the_sky() -> None:
    ep = random_episode(1, 1, 1)
    frame = ep.frames[0, 0]
    assert frame.shape == (128, 128, 3) and frame.dtype == np.uint8
    assert np.array_equal(frame[2, 2], np.round(SKY).astype(np.uint8))
    assert (np.abs(frame.astype(int) - SKY).sum(-1) > 60).sum() > 1000  # the character is there


def test_random_conditions_hold_actions_half_a_second_to_three_and_cover_everything() -> None:
    codes = random_codes(np.random.default_rng(0), 40, 60)
    assert set(np.unique(codes.action)) == set(range(len(ACTION_NAMES)))
    assert codes.speaking.mean() > 0.2 and codes.speaking.mean() < 0.8
    for row in codes.action[:, :-1]:
        changes = np.flatnonzero(np.diff(row)) + 1
        lengths = np.diff(changes)
        assert lengths.min() >= 3 and lengths.max() <= 18  # 3..18 chunks = 0.5..3 s


def test_identities_differ() -> None:
    refs = reference_chunk(np.arange(NUM_IDENTITIES))
    for i in range(NUM_IDENTITIES):
        for j in range(i + 1, NUM_IDENTITIES):
            assert np.abs(refs[i].astype(int) - refs[j]).mean() > 1.5


def _facing_after_turn(before: str, side: str) -> float:
    """The world's facing at the end of a 4-chunk turn that follows 3 chunks of `before`."""
    conds = [ChunkCondition(before)] * 3 + [ChunkCondition("turn", side=side)] * 4
    return float(simulate(encode(conds, phases(conds)), np.array([0])).truth["facing"][0, -1])


def test_a_turn_faces_the_side_it_names_or_turns_around() -> None:
    assert _facing_after_turn("walk_right", "other") < -0.5  # around: from right to left
    assert _facing_after_turn("walk_left", "other") > 0.5
    assert _facing_after_turn("walk_right", "left") < -0.5
    assert _facing_after_turn("walk_left", "left") < -0.5  # already facing left: stays
    assert _facing_after_turn("walk_left", "right") > 0.5


def test_random_turns_name_a_side_half_the_time() -> None:
    codes = random_codes(np.random.default_rng(1), 40, 48)
    onsets = (codes.action == ACTION_NAMES.index("turn")) & (codes.phase0 == 0)
    sides = codes.side[onsets]
    assert 0.3 < np.mean(sides == 0) < 0.7
    assert (sides == -1).any() and (sides == 1).any()
