"""Where a configuration lost its held actions: each action not shown, named by the action held before it
(the context a fixed order hid), with the seeds (and so the identities) that lost it."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from ..world.palette import NUM_IDENTITIES
from .runner import SeedScores

START = "the start"  # what the first held action of a seed comes after


def losses(scores: Sequence[SeedScores]) -> dict[tuple[str, str], list[int]]:
    """(action, the action held before it) -> the seeds whose frames did not show it, most seeds first;
    seeds that did not record their order are left out (``SeedScores.order``)."""
    lost: defaultdict[tuple[str, str], list[int]] = defaultdict(list)
    for s in scores:
        for i, name in enumerate(s.order):
            if s.metrics.get(f"shown.{name}") == 0.0:
                lost[name, s.order[i - 1] if i else START].append(s.seed)
    return dict(sorted(lost.items(), key=lambda item: (-len(item[1]), item[0])))


def describe_losses(scores: Sequence[SeedScores]) -> str:
    """One line per lost context, ``wave after sit: seeds 6 (identity 0), 12 (identity 0)``, or why there
    are none to list."""
    if not any(s.order for s in scores):
        return "(the order of the held actions was not recorded)"
    lost = losses(scores)
    if not lost:
        return "every held action shown on every seed"
    return "\n".join(
        f"- {action} after {before}: seed{'s' * (len(seeds) > 1)} "
        + ", ".join(f"{seed} (identity {seed % NUM_IDENTITIES})" for seed in seeds)
        for (action, before), seeds in lost.items()
    )
