"""Idle variety: what the body and eyes do when no plan holds them, so the character never freezes.

A seeded schedule of small things, a function of the chunk index only (the same seed gives the same idle
life, which keeps sessions replayable): the eyes shift every second or few, and every few seconds a
micro-action (a nod, a glance aside with the head) plays for about a second.

Durations are drawn in seconds and put on the clock of the manifest the schedule is asked with; a
configured micro-action the manifest lacks is left out of the draw (the character does without it).

``IdleVariety.state`` / ``IdleVariety.from_state`` give the schedule as plain data (a story checkpoint).
"""

from __future__ import annotations

import random

import msgspec

from streaming_model.manifest import Manifest


class IdleConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How lively the idle character is. Intervals are (shortest, longest) seconds, drawn uniformly."""

    seed: int = 0
    every_s: tuple[float, float] = (2.5, 5.5)
    hold_s: tuple[float, float] = (0.7, 1.4)
    actions: tuple[str, ...] = ("nod", "look_at", "look_at", "shake_head")
    gaze_every_s: tuple[float, float] = (0.8, 2.5)
    gaze_range: float = 0.35


class IdleMoment(msgspec.Struct, frozen=True):
    """The idle choice for one chunk: an action (with its look_at target) and where the eyes look."""

    action: str
    target: tuple[float, float]
    gaze: tuple[float, float]


class IdleState(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """An ``IdleVariety`` as plain data: its config, its random generator's state and the schedule so far."""

    config: IdleConfig
    rng: tuple[int, tuple[int, ...], float | None]
    actions: list[tuple[int, int, str, tuple[float, float]]]
    gazes: list[tuple[int, tuple[float, float]]]
    action_horizon: int | None
    gaze_horizon: int | None
    """None until the schedule is first asked for a chunk (it learns the clock then)."""


class IdleVariety:
    """The idle schedule of one session, extended lazily as chunks are asked for (on the clock and with the
    actions of the manifest ``at`` is given)."""

    def __init__(self, config: IdleConfig | None = None) -> None:
        self.config = config or IdleConfig()
        self._rng = random.Random(self.config.seed)
        # Spans (start, end, action, target) of micro-actions, and (start, gaze) of eye shifts, in chunks.
        self._actions: list[tuple[int, int, str, tuple[float, float]]] = []
        self._gazes: list[tuple[int, tuple[float, float]]] = [(0, (0.0, 0.0))]
        self._action_horizon: int | None = None
        self._gaze_horizon: int | None = None

    def state(self) -> IdleState:
        """The schedule as plain data; ``from_state`` continues it exactly."""
        return IdleState(
            config=self.config,
            rng=self._rng.getstate(),
            actions=list(self._actions),
            gazes=list(self._gazes),
            action_horizon=self._action_horizon,
            gaze_horizon=self._gaze_horizon,
        )

    @classmethod
    def from_state(cls, state: IdleState) -> IdleVariety:
        """The schedule ``state`` describes; ``ValueError`` if its generator state is not one."""
        idle = cls(state.config)
        try:
            idle._rng.setstate(state.rng)
        except (TypeError, ValueError, OverflowError):
            raise ValueError("the idle schedule's random state is malformed") from None
        if not state.gazes or state.gazes[0][0] > 0:
            raise ValueError("the idle schedule has no gaze from its start")
        idle._actions, idle._gazes = list(state.actions), list(state.gazes)
        idle._action_horizon, idle._gaze_horizon = state.action_horizon, state.gaze_horizon
        return idle

    def _chunks(self, span: tuple[float, float], chunk_s: float) -> int:
        return max(1, round(self._rng.uniform(*span) / chunk_s))

    def _point(self, scale: float) -> tuple[float, float]:
        r = min(1.0, max(0.0, self.config.gaze_range * scale))  # conditions take points in [-1, 1] only
        return (round(self._rng.uniform(-r, r), 3), round(self._rng.uniform(-r / 2, r / 2), 3))

    def _extend(self, k: int, manifest: Manifest) -> None:
        c, chunk_s = self.config, manifest.chunk_s
        if self._action_horizon is None or self._gaze_horizon is None:
            self._action_horizon = self._chunks(c.every_s, chunk_s)
            self._gaze_horizon = self._chunks(c.gaze_every_s, chunk_s)
        known = {a.name for a in manifest.actions}
        actions = [a for a in c.actions if a in known]
        while self._action_horizon <= k:
            start = self._action_horizon
            end = start + self._chunks(c.hold_s, chunk_s)
            action = self._rng.choice(actions) if actions else "idle"
            target = self._point(2.0) if action == "look_at" else (0.0, 0.0)
            self._actions.append((start, end, action, target))
            self._action_horizon = end + self._chunks(c.every_s, chunk_s)
        while self._gaze_horizon <= k:
            self._gazes.append((self._gaze_horizon, self._point(1.0)))
            self._gaze_horizon += self._chunks(c.gaze_every_s, chunk_s)

    def at(self, k: int, manifest: Manifest) -> IdleMoment:
        """What the idle character does in chunk ``k`` on ``manifest``'s clock."""
        self._extend(k, manifest)
        gaze = next(g for start, g in reversed(self._gazes) if start <= k)
        for start, end, action, target in reversed(self._actions):
            if start <= k < end:
                return IdleMoment(action=action, target=target, gaze=gaze)
            if end <= k:
                break
        return IdleMoment(action="idle", target=(0.0, 0.0), gaze=gaze)
