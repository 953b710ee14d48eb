"""The evaluation's side-turn scores can fail: frames that turn the way they are told pass them, frames
that always turn around fail some side turns, and frames that never turn fail the ones that must change
the facing."""

from __future__ import annotations

from collections.abc import Callable

import msgspec
import numpy as np
import pytest

from streaming_model.condition import ChunkCondition
from streaming_model.evaluate import SIDE_TURNS, SeedResult, score, script
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
