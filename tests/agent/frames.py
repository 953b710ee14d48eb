"""Render chunk conditions with the procedural world (the generator's ground truth) for probe checks."""

from __future__ import annotations

import numpy as np

from streaming_model.condition import ChunkCondition, encode, next_phase
from streaming_model.probes import Measures, measure
from streaming_model.world.episodes import simulate


def probe(conditions: list[ChunkCondition], identity: int = 0) -> Measures:
    """What the probes measure on the last frame of each chunk the world renders for ``conditions``."""
    phases, prev, phase = [], None, 0
    for c in conditions:
        phase = next_phase(prev, phase, c.action)
        phases.append(phase)
        prev = c.action
    frames = simulate(encode(conditions, phases), np.array([identity])).frames[0]
    return measure(frames[3::4], identity)
