"""Random but plausible condition sequences, and rendering them into episodes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..condition import ChunkCodes, next_phase
from ..manifest import ACTION_INDEX, ACTION_NAMES, FRAMES_PER_CHUNK, SCENE, SCENE_ACTIONS, WORLD_ACTION_NAMES
from .palette import NUM_IDENTITIES
from .render import render, render_scenery
from .state import WorldState, initial_state, step

# How often each action is drawn (order of ACTION_NAMES).
ACTION_WEIGHTS = {
    "idle": 0.12,
    "walk_left": 0.12,
    "walk_right": 0.12,
    "turn": 0.07,
    "jump": 0.08,
    "sit": 0.08,
    "wave": 0.10,
    "nod": 0.07,
    "shake_head": 0.07,
    "startle": 0.05,
    "look_at": 0.12,
}
# With a scene, the actions toward it are drawn too, this often.
SCENE_ACTION_WEIGHTS = {
    "go_to_door": 0.04,
    "open_door": 0.06,
    "close_door": 0.05,
    "pick_up": 0.08,
    "put_down": 0.05,
    "throw": 0.06,
}
SCENE_TRUTH_FIELDS = (
    "rain",
    "snow",
    "lamp_show",
    "door_show",
    "door_open",
    "ball_show",
    "ball_x",
    "ball_y",
    "held",
)
TRUTH_FIELDS = (
    "x",
    "facing",
    "sit",
    "jump_y",
    "paw_l",
    "paw_r",
    "mouth",
    "nod",
    "shake",
    "gaze_x",
    "gaze_y",
    "surprise",
)


@dataclass
class Episode:
    """Rendered frames of N worlds over K chunks, with their conditions and per-frame truth."""

    frames: np.ndarray  # (N, 4K, H, W, 3) uint8
    reference: np.ndarray  # (N, 4, H, W, 3) uint8: the identity's reference chunk
    codes: ChunkCodes  # (N, K)
    identity: np.ndarray  # (N,)
    truth: dict[str, np.ndarray]  # field -> (N, 4K) float32; "light" (N, 4K, 3)
    scenery: np.ndarray | None = None  # (N, 4K, H, W, 3) uint8: each frame without the character, if asked


def _segments(rng: np.random.Generator, k: int, lo: int, hi: int) -> list[tuple[int, int]]:
    out, start = [], 0
    while start < k:
        length = int(rng.integers(lo, hi + 1))
        out.append((start, min(k, start + length)))
        start += length
    return out


def random_codes(rng: np.random.Generator, n: int, k: int, scene: bool = False) -> ChunkCodes:
    """Condition sequences: actions held 0.5-3 s, independent emotion, gaze and talking segments; with
    ``scene``, also a scene that changes every 2-8 s and the actions toward it (``random_scene``)."""
    weights = {**ACTION_WEIGHTS, **(SCENE_ACTION_WEIGHTS if scene else {})}
    names = WORLD_ACTION_NAMES if scene else ACTION_NAMES
    probs = np.array([weights[a] for a in names])
    probs /= probs.sum()
    codes = ChunkCodes(
        action=np.zeros((n, k), np.int64),
        emotion=np.zeros((n, k), np.int64),
        target=np.zeros((n, k, 2), np.float32),
        gaze=np.zeros((n, k, 2), np.float32),
        side=np.ones((n, k), np.float32),
        speaking=np.zeros((n, k), np.float32),
        audio=np.zeros((n, k, FRAMES_PER_CHUNK), np.float32),
        phase0=np.zeros((n, k), np.int64),
    )
    for i in range(n):
        prev = -1
        for a, b in _segments(rng, k, 3, 18):
            act = prev
            while act == prev:  # a repeated action would continue, not restart, its phase
                act = int(rng.choice(len(probs), p=probs))
            prev = act
            codes.action[i, a:b] = act
            codes.phase0[i, a:b] = np.arange(b - a) * FRAMES_PER_CHUNK
            codes.target[i, a:b] = rng.uniform(-1, 1, 2)
            # Half the turns name a side, half turn around (side 0).
            sides = [-1.0, 0.0, 0.0, 1.0] if names[act] == "turn" else [-1.0, 1.0]
            codes.side[i, a:b] = rng.choice(sides)
        for a, b in _segments(rng, k, 3, 12):
            codes.gaze[i, a:b] = rng.uniform(-1, 1, 2) if rng.random() < 0.6 else 0.0
        for a, b in _segments(rng, k, 6, 30):
            codes.emotion[i, a:b] = 0 if rng.random() < 0.35 else int(rng.integers(1, 5))
        for a, b in _segments(rng, k, 6, 30):
            codes.speaking[i, a:b] = float(rng.random() < 0.5)
        codes.audio[i] = _envelope(rng, k * FRAMES_PER_CHUNK).reshape(k, FRAMES_PER_CHUNK)
    if scene:
        codes.scene = random_scene(rng, codes.action)
        _idle_at_changes(rng, codes)
    return codes


IDLE_AT_CHANGE = 0.5
"""Share of the scene's own changes (not those an action makes) the character stands idle through."""
IDLE_BEFORE, IDLE_AFTER = 2, 6
"""Chunks of that idle before and after the change."""


def _idle_at_changes(rng: np.random.Generator, codes: ChunkCodes) -> None:
    """Stand the character idle around about half of the scene's own changes, as a user or a story
    mostly changes the scene while the character waits or talks: with the actions drawn independently,
    5-12 % of the changes fell in idle, and a transformer trained on them drew none of the door, lamp,
    weather or ball asked for while it stood still. Windows that would cut an action toward the scene (or
    meet one in the chunk after) are left out: its first chunk sets the scene. Phases restart where an
    action resumes after the idle."""
    assert codes.scene is not None
    idle, sets = ACTION_INDEX["idle"], np.array(sorted(_SETS))
    n, k = codes.action.shape
    changed = (codes.scene[:, 1:] != codes.scene[:, :-1]).any(-1)
    for i, c in np.argwhere(changed):
        c += 1  # the first chunk of the new scene
        a, b = max(0, c - IDLE_BEFORE), min(k, c + IDLE_AFTER)
        if rng.random() >= IDLE_AT_CHANGE or np.isin(codes.action[i, a : min(k, b + 1)], sets).any():
            continue
        codes.action[i, a:b] = idle
    # Phases follow the actions as the runtime counts them.
    for i in range(n):
        prev: str | None = None
        for c in range(k):
            act = WORLD_ACTION_NAMES[codes.action[i, c]]
            codes.phase0[i, c] = next_phase(prev, int(codes.phase0[i, c - 1]) if c else 0, act)
            prev = act


_PART = {spec.name: p for p, spec in enumerate(SCENE)}
_SETS = {ACTION_INDEX[a.name]: a.sets for a in SCENE_ACTIONS if a.sets}


def random_scene(rng: np.random.Generator, action: np.ndarray) -> np.ndarray:
    """(N, K, len(SCENE)) scene choices: each part changes every 2-8 s (the ball is there in most
    episodes), and an action that sets part of the scene (``ActionSpec.sets``: opening the door, taking
    the ball) has the scene agree from its first chunk on, as a caller that asks for it sets it."""
    n, k = action.shape
    out = np.zeros((n, k, len(SCENE)), np.int64)
    for i in range(n):
        for p, spec in enumerate(SCENE):
            if spec.name == "prop" and rng.random() < 0.85:
                out[i, :, p] = 1
                continue
            for a, b in _segments(rng, k, 12, 48):
                out[i, a:b, p] = int(rng.integers(len(spec.choices)))
        for c in range(k):
            if c > 0 and action[i, c] == action[i, c - 1]:
                continue
            for part, choice in _SETS.get(int(action[i, c]), ()):
                out[i, c:, _PART[part]] = SCENE[_PART[part]].choices.index(choice)
    return out


def _envelope(rng: np.random.Generator, frames: int) -> np.ndarray:
    """A speech-like loudness envelope in [0, 1]: syllables of 3-8 frames with pauses."""
    env = np.zeros(frames, np.float32)
    t = 0
    while t < frames:
        length = int(rng.integers(3, 9))
        peak = rng.uniform(0.3, 1.0) if rng.random() < 0.8 else 0.0
        env[t : t + length] = peak * np.sin(np.linspace(0, np.pi, length + 2)[1:-1])[: frames - t]
        t += length
    return env


def reference_chunk(identity: np.ndarray) -> np.ndarray:
    """The reference chunk of each identity: 4 still frames of the initial pose, (N, 4, H, W, 3)."""
    frame = render(initial_state(np.asarray(identity)))
    return np.repeat(frame[:, None], FRAMES_PER_CHUNK, axis=1)


def simulate(
    codes: ChunkCodes, identity: np.ndarray, state: WorldState | None = None, scenery: bool = False
) -> Episode:
    """Advance the worlds frame by frame under codes and render every frame (``scenery``: and each
    frame's scene without the character, ``render_scenery``)."""
    n, k = codes.action.shape
    s = initial_state(identity) if state is None else state
    reference = reference_chunk(identity)
    frames = np.empty((n, k * FRAMES_PER_CHUNK, *reference.shape[2:]), np.uint8)
    truth = {f: np.empty((n, k * FRAMES_PER_CHUNK), np.float32) for f in TRUTH_FIELDS + SCENE_TRUTH_FIELDS}
    truth["light"] = np.empty((n, k * FRAMES_PER_CHUNK, 3), np.float32)
    alone = np.empty_like(frames) if scenery else None
    for c in range(k):
        for j in range(FRAMES_PER_CHUNK):
            step(
                s,
                codes.action[:, c],
                codes.phase0[:, c] + j,
                codes.target[:, c],
                codes.gaze[:, c],
                codes.side[:, c],
                codes.emotion[:, c],
                codes.speaking[:, c],
                codes.audio[:, c, j],
                None if codes.scene is None else codes.scene[:, c],
            )
            t = c * FRAMES_PER_CHUNK + j
            frames[:, t] = render(s)
            if alone is not None:
                alone[:, t] = render_scenery(s)
            for f in TRUTH_FIELDS[:-1]:
                truth[f][:, t] = getattr(s, f)
            for f in SCENE_TRUTH_FIELDS:
                truth[f][:, t] = getattr(s, f)
            truth["light"][:, t] = s.light
            truth["surprise"][:, t] = s.emo[:, 3]  # a surprised face opens the mouth a little
    return Episode(frames, reference, codes, np.asarray(identity), truth, alone)


def random_episode(seed: int, n: int, k: int, scene: bool = False, scenery: bool = False) -> Episode:
    """n random worlds (random identities) over k chunks, reproducible from seed; ``scene``: with a scene
    that changes and the actions toward it; ``scenery``: with each frame's scene alone (``simulate``)."""
    rng = np.random.default_rng(seed)
    identity = rng.integers(0, NUM_IDENTITIES, n)
    return simulate(random_codes(rng, n, k, scene), identity, scenery=scenery)
