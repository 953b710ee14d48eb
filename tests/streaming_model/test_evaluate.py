"""The evaluation's side-turn scores can fail: frames that turn the way they are told pass them, frames
that always turn around fail some side turns, and frames that never turn fail the ones that must change
the facing. A shuffled script holds every action once, in an order drawn from its seed, and the world
shows every action in it."""

from __future__ import annotations

from collections.abc import Callable

import msgspec
import numpy as np
import pytest

from streaming_model.condition import ChunkCondition
from streaming_model.evaluate import SIDE_TURNS, SeedResult, score, script
from streaming_model.manifest import ACTION_NAMES
from streaming_model.render import world_frames
from streaming_model.world.palette import NUM_IDENTITIES

SEEDS = (0, 1)


def _scored(change: Callable[[ChunkCondition], ChunkCondition]) -> list[SeedResult]:
    """Each seed's script, its named-side turns changed by ``change``, rendered by the world and scored
    against the script as written."""
    results = []
    for seed in SEEDS:
        conds, segments = script(seed)
        sided = [c.action == "turn" and c.side != "other" for c in conds]
        shown = [change(c) if s else c for c, s in zip(conds, sided, strict=True)]
        results.append(score(world_frames(shown, seed % NUM_IDENTITIES), seed % NUM_IDENTITIES, segments))
    return results


@pytest.fixture(scope="module")
def as_told() -> list[SeedResult]:
    return _scored(lambda c: c)


def test_turns_to_the_named_side_pass(as_told: list[SeedResult]) -> None:
    assert all(r.actions["turn_side"] == 1.0 for r in as_told)
    away = [shown for r in as_told for shown in r.turns_away]
    assert away and all(away)


def test_turning_around_whatever_the_side_fails_the_turns_that_start_on_that_side(
    as_told: list[SeedResult],
) -> None:
    around = _scored(lambda c: msgspec.structs.replace(c, side="other"))
    # Some turns already faced the side named: turning around leaves them facing the other one.
    assert sum(len(r.turns_away) for r in as_told) < SIDE_TURNS * len(SEEDS)
    assert np.mean([r.actions["turn_side"] for r in around]) < 1.0


def test_not_turning_fails_every_turn_that_must_change_the_facing() -> None:
    still = _scored(lambda c: msgspec.structs.replace(c, action="idle"))
    away = [shown for r in still for shown in r.turns_away]
    assert away and not any(away)


def _held(segments: list[tuple[str, int, dict]]) -> list[str]:
    return [name for name, _, _ in segments if name in ACTION_NAMES]


def test_a_fixed_script_holds_the_actions_in_the_order_given() -> None:
    assert _held(script(3)[1]) == list(ACTION_NAMES)
    assert _held(script(3, ("sit", "wave"), side_turns=0)[1]) == ["sit", "wave"]


def test_a_shuffled_script_holds_every_action_once_in_an_order_its_seed_draws() -> None:
    orders = [_held(script(seed, order="shuffled")[1]) for seed in range(6)]
    assert all(sorted(order) == sorted(ACTION_NAMES) for order in orders)
    assert len({tuple(order) for order in orders}) == len(orders)  # six seeds, six orders
    assert script(4, order="shuffled")[0] == script(4, order="shuffled")[0]  # a seed reruns its own order


def test_the_world_shows_every_action_of_a_shuffled_script_and_the_score_keeps_its_order() -> None:
    for seed in SEEDS:
        conds, segments = script(seed, order="shuffled")
        identity = seed % NUM_IDENTITIES
        result = score(world_frames(conds, identity), identity, segments)
        assert result.order == _held(segments)
        assert all(shown == 1.0 for shown in result.actions.values()), result.actions
