"""Random but plausible condition sequences, and rendering them into episodes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..condition import ChunkCodes
from ..manifest import ACTION_NAMES, FRAMES_PER_CHUNK
from .palette import NUM_IDENTITIES
from .render import render
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
    truth: dict[str, np.ndarray]  # field -> (N, 4K) float32


def _segments(rng: np.random.Generator, k: int, lo: int, hi: int) -> list[tuple[int, int]]:
    out, start = [], 0
    while start < k:
        length = int(rng.integers(lo, hi + 1))
        out.append((start, min(k, start + length)))
        start += length
    return out


def random_codes(rng: np.random.Generator, n: int, k: int) -> ChunkCodes:
    """Condition sequences: actions held 0.5-3 s, independent emotion, gaze and talking segments."""
    probs = np.array([ACTION_WEIGHTS[a] for a in ACTION_NAMES])
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
            sides = [-1.0, 0.0, 0.0, 1.0] if ACTION_NAMES[act] == "turn" else [-1.0, 1.0]
            codes.side[i, a:b] = rng.choice(sides)
        for a, b in _segments(rng, k, 3, 12):
            codes.gaze[i, a:b] = rng.uniform(-1, 1, 2) if rng.random() < 0.6 else 0.0
        for a, b in _segments(rng, k, 6, 30):
            codes.emotion[i, a:b] = 0 if rng.random() < 0.35 else int(rng.integers(1, 5))
        for a, b in _segments(rng, k, 6, 30):
            codes.speaking[i, a:b] = float(rng.random() < 0.5)
        codes.audio[i] = _envelope(rng, k * FRAMES_PER_CHUNK).reshape(k, FRAMES_PER_CHUNK)
    return codes


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


def simulate(codes: ChunkCodes, identity: np.ndarray, state: WorldState | None = None) -> Episode:
    """Advance the worlds frame by frame under codes and render every frame."""
    n, k = codes.action.shape
    s = initial_state(identity) if state is None else state
    reference = reference_chunk(identity)
    frames = np.empty((n, k * FRAMES_PER_CHUNK, *reference.shape[2:]), np.uint8)
    truth = {f: np.empty((n, k * FRAMES_PER_CHUNK), np.float32) for f in TRUTH_FIELDS}
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
            )
            t = c * FRAMES_PER_CHUNK + j
            frames[:, t] = render(s)
            for f in TRUTH_FIELDS[:-1]:
                truth[f][:, t] = getattr(s, f)
            truth["surprise"][:, t] = s.emo[:, 3]  # a surprised face opens the mouth a little
    return Episode(frames, reference, codes, np.asarray(identity), truth)


def random_episode(seed: int, n: int, k: int) -> Episode:
    """n random worlds (random identities) over k chunks, reproducible from seed."""
    rng = np.random.default_rng(seed)
    identity = rng.integers(0, NUM_IDENTITIES, n)
    return simulate(random_codes(rng, n, k), identity)
