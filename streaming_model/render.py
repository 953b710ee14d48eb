"""Render a short scripted sequence of actions to an animated WebP or GIF (for `onstage render`)."""

from __future__ import annotations

from pathlib import Path

import msgspec
import numpy as np
from PIL import Image

from .condition import ChunkCondition, encode, phases
from .manifest import FPS, FRAMES_PER_CHUNK, build_manifest
from .sampler import STEPS
from .world.episodes import simulate


class Beat(msgspec.Struct, frozen=True):
    """One step of a script: an action held for some seconds, with its manner."""

    action: str
    seconds: float = 1.0
    emotion: str = "neutral"
    speaking: bool = False
    paw: str = "right"
    side: str = "other"
    target: tuple[float, float] = (0.0, 0.0)
    gaze: tuple[float, float] = (0.0, 0.0)
    scene: dict[str, str] = {}
    """Scene parts this beat changes (held until a later beat changes them): the world backend draws them,
    the shipped model does not yet."""


DEMO: tuple[Beat, ...] = (
    Beat("idle", 0.5),
    Beat("wave", 1.5, emotion="happy", speaking=True),
    Beat("walk_right", 1.5),
    Beat("turn", 0.7),
    Beat("walk_left", 1.0, emotion="surprised"),
    Beat("jump", 1.0, emotion="happy"),
    Beat("nod", 1.0, speaking=True),
    Beat("sit", 1.0, emotion="sad"),
    Beat("look_at", 1.0, target=(-0.9, -0.5)),
    Beat("shake_head", 1.0, emotion="angry", speaking=True),
)


SCENE_DEMO: tuple[Beat, ...] = (
    Beat("idle", 0.5, scene={"prop": "ball", "door": "closed", "lamp": "off"}),
    Beat("pick_up", 2.0),
    Beat("walk_right", 1.2),
    Beat("turn", 0.7, side="left"),
    Beat("throw", 1.2, emotion="happy"),
    Beat("idle", 1.5, scene={"light": "dusk"}),
    Beat("look_at", 2.0, target=(-0.9, -0.6), scene={"light": "night", "lamp": "on", "weather": "rain"}),
    Beat("open_door", 3.5, emotion="surprised"),
    Beat("wave", 2.0, emotion="happy", speaking=True, scene={"weather": "snow"}),
    Beat("close_door", 1.5),
    Beat("idle", 1.5, scene={"light": "day", "weather": "clear", "lamp": "none"}),
)
"""A short tour of the scene: a ball picked up and thrown, dusk, a rainy night under the lamp, the door."""


def conditions(beats: tuple[Beat, ...] | list[Beat], seed: int = 0) -> list[ChunkCondition]:
    """Per-chunk conditions for a script; talking beats get a speech-like audio envelope. Scene changes
    are checked against the world's vocabulary (a model that draws no scene refuses them when asked)."""
    rng = np.random.default_rng(seed)
    world = build_manifest(scene=True)
    scene: dict[str, str] = {}
    out = []
    for b in beats:
        scene.update(b.scene)
        for _ in range(max(1, round(b.seconds * FPS / FRAMES_PER_CHUNK))):
            audio = (
                tuple(float(a) for a in rng.uniform(0.0, 1.0, FRAMES_PER_CHUNK)) if b.speaking else (0.0,) * 4
            )
            c = ChunkCondition(
                b.action,
                b.target,
                b.gaze,
                b.paw,
                b.emotion,
                b.speaking,
                audio,
                side=b.side,
                scene=tuple(scene.items()),
            )
            c.validate(world)
            out.append(c)
    return out


def world_frames(conds: list[ChunkCondition], identity: int) -> np.ndarray:
    """What the procedural world shows for these conditions (the truth the model was trained on), its
    scene and the actions toward it included."""
    codes = encode(conds, phases(conds), build_manifest(scene=True))
    return simulate(codes, np.array([identity])).frames[0]


def model_frames(conds: list[ChunkCondition], identity: int, seed: int, steps: int) -> np.ndarray:
    """What the default model generates for these conditions."""
    from .runtime import Generator  # torch models load only when the model is asked for

    session = Generator.load().open_session(identity=identity, seed=seed, steps=steps)
    return np.concatenate([session.step(c) for c in conds])


def render(
    beats: tuple[Beat, ...] | list[Beat] = DEMO,
    path: str | Path = "onstage.webp",
    seed: int = 0,
    identity: int = 0,
    source: str = "model",
    steps: int = STEPS,
    scale: int = 2,
) -> Path:
    """Write an animated WebP (or GIF, by suffix) of the script.

    source: "model" (default weights), "world" (procedural truth) or "both" (side by side, truth left).
    """
    if source not in ("model", "world", "both"):
        raise ValueError(f"source must be 'model', 'world' or 'both', got {source!r}")
    conds = conditions(beats, seed)
    parts = []
    if source in ("world", "both"):
        parts.append(world_frames(conds, identity))
    if source in ("model", "both"):
        parts.append(model_frames(conds, identity, seed, steps))
    frames = np.concatenate(parts, axis=2)
    images = [
        Image.fromarray(f).resize((f.shape[1] * scale, f.shape[0] * scale), Image.Resampling.NEAREST)
        for f in frames
    ]
    out = Path(path)
    images[0].save(out, save_all=True, append_images=images[1:], duration=round(1000 / FPS), loop=0)
    return out
