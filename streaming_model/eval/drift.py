"""The long-session drift probe: does a character keep its colours and keep moving as a session goes on?

One session per seed plays a cycle of ``WINDOW`` chunks again and again (walk left, wave, walk right,
nod); per cycle (a window) it measures the identity distance (median over the window's frames of the body
colour's distance to the reference palette) and the motion amplitude (mean |dx| per frame, in pixels, over
the window's walking frames). Drift shows as an identity distance that rises window after window, freezing
as a motion amplitude that falls.
"""

from __future__ import annotations

import warnings

import msgspec
import numpy as np

from ..condition import ChunkCondition
from ..manifest import FRAMES_PER_CHUNK
from ..probes import measure
from ..runtime import Generator
from ..world.palette import NUM_IDENTITIES
from .options import RunOptions

CYCLE: tuple[tuple[str, int], ...] = (("walk_left", 3), ("wave", 2), ("walk_right", 3), ("nod", 2))
WINDOW = sum(n for _, n in CYCLE)  # chunks
_WALKS = frozenset({"walk_left", "walk_right"})


class Drift(msgspec.Struct, frozen=True, kw_only=True):
    """One seed's long session, window by window (NaN, stored as None, where nothing was measured)."""

    identity_dist: list[float | None]
    motion_px: list[float | None]


def drift_script(chunks: int) -> list[ChunkCondition]:
    """The long session's conditions: ``CYCLE`` repeated over ``chunks`` (a multiple of ``WINDOW``)."""
    if chunks < 2 * WINDOW or chunks % WINDOW:
        raise ValueError(f"the drift session needs a multiple of {WINDOW} chunks, at least {2 * WINDOW}")
    cycle = [ChunkCondition(action) for action, n in CYCLE for _ in range(n)]
    return cycle * (chunks // WINDOW)


def run_drift(gen: Generator, seed: int, options: RunOptions, chunks: int) -> Drift:
    """Play the long session with the configuration's options and measure it window by window."""
    identity = seed % NUM_IDENTITIES
    session = gen.open_session(
        identity=identity,
        seed=seed,
        steps=options.steps,
        cache_mode=options.cache,
        cache_noise=options.cache_noise,
        linears=options.linears,
        commit_pass=options.commit_pass,
    )
    conds = drift_script(chunks)
    frames = np.stack([session.step(c) for c in conds])  # (chunks, 4, H, W, 3)
    walking = np.array([c.action in _WALKS for c in conds])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a window without a character found is NaN
        m = measure(frames.reshape(-1, *frames.shape[2:]), identity)
        dx = np.abs(np.diff(m.x, prepend=np.nan)).reshape(chunks, FRAMES_PER_CHUNK)
        dist = m.identity_dist.reshape(chunks, FRAMES_PER_CHUNK)
        identity_dist, motion = [], []
        for w in range(chunks // WINDOW):
            sl = slice(w * WINDOW, (w + 1) * WINDOW)
            identity_dist.append(_stored(np.nanmedian(dist[sl])))
            motion.append(_stored(np.nanmean(dx[sl][walking[sl]])))
    return Drift(identity_dist=identity_dist, motion_px=motion)


def _stored(value: float) -> float | None:
    return None if np.isnan(value) else float(value)
