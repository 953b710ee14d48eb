"""The probe metrics one seed gives, by name, with what each measures and which way is better."""

from __future__ import annotations

import math

import msgspec

from ..evaluate import SeedResult
from .drift import Drift


class Metric(msgspec.Struct, frozen=True):
    """What a metric measures, and whether a higher value is better (+1), worse (-1) or neither (0)."""

    name: str
    meaning: str
    better: int


_FIXED = (
    Metric("actions_shown", "share of the held actions the frames show", +1),
    Metric("turn_side_away", "share of side turns that had to change the facing and did", +1),
    Metric("mouth_r", "correlation of the mouth's openness with the voice envelope", +1),
    Metric("identity_dist", "body colour's distance to the reference palette (RGB, median)", -1),
    Metric("motion_end_px", "mean |dx| per frame in the script's last walk (px)", 0),
    Metric("drift.identity_rise", "long session: identity distance, last window minus first", -1),
    Metric("drift.motion_ratio", "long session: walking motion, last window over first", 0),
)


def catalogue(actions: tuple[str, ...], side_turns: int, drift: bool) -> list[Metric]:
    """The metrics of a script with these actions and side turns (and the drift probe or not), in the
    order a report lists them: the summaries first, then each action."""
    fixed = [m for m in _FIXED if drift or not m.name.startswith("drift.")]
    if not side_turns:
        fixed = [m for m in fixed if m.name != "turn_side_away"]
    shown = [
        Metric(f"shown.{a}", f"the frames show {a} when it is held (share of seeds)", +1) for a in actions
    ]
    if side_turns:
        shown.append(Metric("shown.turn_side", "share of side turns that end on the named side", +1))
    return [*fixed, *shown]


def seed_metrics(result: SeedResult, drift: Drift | None) -> dict[str, float | None]:
    """One seed's value of every metric (None where it measured nothing, e.g. no side turn had to change
    the facing)."""
    held = [v for name, v in result.actions.items() if name != "turn_side"]
    values: dict[str, float] = {
        "actions_shown": sum(held) / len(held),
        "mouth_r": result.mouth_r,
        "identity_dist": result.identity_dist,
        "motion_end_px": result.motion_end,
        **{f"shown.{name}": float(v) for name, v in result.actions.items()},
    }
    if "turn_side" in result.actions:
        away = result.turns_away
        values["turn_side_away"] = sum(away) / len(away) if away else math.nan
    if drift is not None:
        dist, motion = drift.identity_dist, drift.motion_px
        values["drift.identity_rise"] = _minus(dist[-1], dist[0])
        values["drift.motion_ratio"] = _over(motion[-1], motion[0])
    return {name: (None if math.isnan(v) else float(v)) for name, v in values.items()}


def _minus(a: float | None, b: float | None) -> float:
    return math.nan if a is None or b is None else a - b


def _over(a: float | None, b: float | None) -> float:
    return math.nan if a is None or b is None or b == 0 else a / b
