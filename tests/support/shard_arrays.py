"""Shard arrays made by hand, shaped as ``dit_data`` writes them, for tests of what training reads."""

from __future__ import annotations

import numpy as np

from streaming_model.manifest import SCENE


def night_falls(episodes: int = 2, chunks: int = 24) -> dict[str, np.ndarray]:
    """Shard arrays of idle episodes where night falls at chunk 10 of the first; the second keeps today's
    world."""
    scene = np.zeros((episodes, chunks, len(SCENE)), np.int64)
    scene[0, 10:, 0] = 2
    return {
        "latents": np.zeros((episodes, chunks, 16, 16, 16), np.float16),
        "masks": np.zeros((episodes, chunks, 64), bool),
        "faces": np.zeros((episodes, chunks, 64), bool),
        "parts": np.zeros((episodes, chunks, 64), bool),  # neither lamp nor door
        "identity": np.zeros(episodes, np.int64),
        "action": np.zeros((episodes, chunks), np.int64),  # idle throughout: no action onset but the first
        "emotion": np.zeros((episodes, chunks), np.int64),
        "target": np.zeros((episodes, chunks, 2), np.float32),
        "gaze": np.zeros((episodes, chunks, 2), np.float32),
        "side": np.zeros((episodes, chunks), np.float32),
        "speaking": np.zeros((episodes, chunks), np.float32),
        "audio": np.zeros((episodes, chunks, 4), np.float32),
        "phase0": np.arange(chunks)[None].repeat(episodes, 0) * 4,
        "scene": scene,
    }
