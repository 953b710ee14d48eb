"""Does a model (or the world) draw the scene it is asked for? Per seed, one session goes through every
choice of every scene part and every action toward the scene, and the scene probes read the frames.

    python -m streaming_model.evaluate --scene --seeds 20 [--world | --weights checkpoints/dit_scene/dit.safetensors]

A choice counts as shown when every frame of the last 8 of its ``SETTLE`` chunks reads it (the light
within 0.08 per channel of what it settles to); an action toward the scene by ``scene_action_shown``
(putting down and throwing only if the ball was in the paw when they began, as the script arranges). A
model whose weights do not read the scene refuses the script (``ConditionError``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np

from .condition import ChunkCondition
from .manifest import FRAMES_PER_CHUNK, SCENE
from .probes import _slice, measure_with_scene
from .runtime import Generator
from .scene_probes import (
    SceneMeasures,
    ball_held,
    light_shown,
    scene_action_shown,
    weather_shown,
)
from .world.palette import NUM_IDENTITIES

SETTLE = 16
"""Chunks a scene choice is held before it is read (the light takes about 60 frames to settle)."""
READ = 8
"""Frames at the end of a choice's chunks that must all show it."""
ACTIONS: tuple[tuple[str, int], ...] = (
    ("go_to_door", 10),
    ("open_door", 12),
    ("close_door", 12),
    ("pick_up", 12),
    ("put_down", 6),
    ("pick_up", 10),
    ("throw", 8),
)
"""The actions toward the scene, in an order where each can be shown, with their chunks."""

Segment = tuple[
    str, str, int, int, dict[str, str]
]  # kind ("scene" / "action"), name, first, last chunk, scene


def scene_script(seed: int) -> tuple[list[ChunkCondition], list[Segment]]:
    """Conditions and segments of one seed: every part through its choices (the default last, as a change
    back), the other parts where the seed's draws left them; then the actions with a door and a ball."""
    rng = np.random.default_rng(seed)
    scene: dict[str, str] = {}
    conds: list[ChunkCondition] = []
    segments: list[Segment] = []

    def hold(action: str, chunks: int, kind: str, name: str) -> None:
        start = len(conds)
        conds.extend([ChunkCondition(action, scene=tuple(scene.items()))] * chunks)
        segments.append((kind, name, start, len(conds), dict(scene)))

    for spec in SCENE:
        for choice in (*rng.permutation(spec.choices[1:]).tolist(), spec.choices[0]):
            scene[spec.name] = choice
            hold("idle", SETTLE, "scene", f"{spec.name}={choice}")
    scene.update(door="closed", prop="ball")
    hold("idle", SETTLE // 2, "setup", "door and ball")
    for action, chunks in ACTIONS:
        hold(action, chunks, "action", action)
    return conds, segments


def shown(part: str, choice: str, scene: dict[str, str], m: SceneMeasures) -> bool:
    """Do every one of the frames measured show ``part`` at ``choice`` (in ``scene``)?"""
    if part == "light":
        return bool(light_shown(m, choice, scene.get("lamp", "none")).all())
    if part == "lamp":
        return bool(((m.lamp_shown == (choice != "none")) & (m.lamp_on == (choice == "on"))).all())
    if part == "weather":
        choices = next(s.choices for s in SCENE if s.name == "weather")
        return bool((weather_shown(m) == choices.index(choice)).all())
    if part == "door":
        if choice == "none":
            return not m.door_shown.any()
        open_ = choice == "open"
        return bool((m.door_shown & ((m.door_open > 0.9) if open_ else (m.door_open < 0.1))).all())
    if part == "prop":
        return bool((m.ball_shown == (choice == "ball")).all())
    raise ValueError(f"unknown scene part {part!r}")


def score_scene(frames: np.ndarray, identity: int, segments: list[Segment]) -> dict[str, bool]:
    """Verdict per segment name (a name seen twice, as ``pick_up``, gets both: ``pick_up``, ``pick_up#2``)."""
    out: dict[str, bool] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m, sm = measure_with_scene(frames, identity)
    for kind, name, first, last, scene in segments:
        frames_of = slice(first * FRAMES_PER_CHUNK, last * FRAMES_PER_CHUNK)
        if kind == "scene":
            end = slice(last * FRAMES_PER_CHUNK - READ, last * FRAMES_PER_CHUNK)
            part, choice = name.split("=")
            verdict = shown(part, choice, scene, _part(sm, end))
        elif kind == "action":
            seen, scene_seen = _slice(m, frames_of), _part(sm, frames_of)
            verdict = scene_action_shown(name, seen, scene_seen)
            if name in ("put_down", "throw"):  # the script took the ball first: with none, nothing was shown
                verdict = verdict and bool(ball_held(seen, scene_seen)[0])
        else:
            continue
        key = name if name not in out else f"{name}#2"
        out[key] = verdict
    return out


def _part(m: SceneMeasures, frames: slice) -> SceneMeasures:
    return SceneMeasures(**{k: v[frames] for k, v in vars(m).items()})


def run_scene(draw: Callable[[list[ChunkCondition], int, int], np.ndarray], seeds: range) -> dict[str, float]:
    """Share of seeds showing each choice and action; ``draw(conditions, identity, seed)`` gives frames."""
    verdicts: dict[str, list[bool]] = {}
    for seed in seeds:
        identity = seed % NUM_IDENTITIES
        conds, segments = scene_script(seed)
        for name, ok in score_scene(draw(conds, identity, seed), identity, segments).items():
            verdicts.setdefault(name, []).append(ok)
    return {name: float(np.mean(v)) for name, v in verdicts.items()}


def model_draw(gen: Generator, steps: int) -> Callable[[list[ChunkCondition], int, int], np.ndarray]:
    """Frames of a session of ``gen`` (one per seed) for a scene script."""

    def draw(conds: list[ChunkCondition], identity: int, seed: int) -> np.ndarray:
        session = gen.open_session(identity=identity, seed=seed, steps=steps)
        return np.concatenate([session.step(c) for c in conds])

    return draw
