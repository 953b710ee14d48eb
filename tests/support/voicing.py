"""For tests of a client's own voice (binary kind 0x04): a world-backed server and real Piper speech.

The ``world`` backend draws the procedural world straight from each chunk's condition, so its mouth is the
condition's mouth envelope and the probes read it exactly, and it is fast where the model is not the
subject of the test.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import warnings
from collections.abc import AsyncIterator

import numpy as np

from server.app import OnstageServer
from server.limits import Limits
from server.media import pcm16
from server.sessions import SessionFactory
from server.voice import Voice
from streaming_model.backends import open_backend
from streaming_model.probes import measure
from tests.support.serving import serving

STILL = {"name": "still", "idle": {"actions": []}, "timeline": []}
"""A plan that does nothing by itself (no idle variety): what the pictures show is what was asked for."""

SPEECH = "Hello there! It is lovely to see you again. Shall we begin?"
"""About three seconds of speech in three sentences, with pauses between them."""


@contextlib.asynccontextmanager
async def world_server(factory: SessionFactory) -> AsyncIterator[tuple[OnstageServer, str]]:
    """A loopback server whose sessions draw the ``world`` (the shared voice and ears of ``factory``)."""
    backend = await asyncio.to_thread(open_backend, "world", {})
    sessions = SessionFactory(backend, factory.voice, factory.hearing)
    async with serving(sessions, Limits(admission="ceiling", max_sessions=4, resume_grace_s=0.2)) as served:
        yield served


@functools.cache
def speech_pcm(text: str = SPEECH, rate: int = 24_000) -> bytes:
    """``text`` spoken by Piper (the character's own voice model), PCM16 LE mono at ``rate``."""
    return pcm16(Voice(rate).synthesize(text).samples)


def loudness(pcm: bytes) -> float:
    """RMS of PCM16 samples (0 for none)."""
    samples = np.frombuffer(pcm, "<i2").astype(np.float64)
    return float(np.sqrt(np.mean(samples**2))) if samples.size else 0.0


def mouths(pictures: np.ndarray, identity: int = 0) -> np.ndarray:
    """How open the mouth is in each (N, 128, 128, 3) world picture, as the probes read it (0 where no
    mouth is found)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # frames where no mouth is found give NaN (and a warning)
        return np.nan_to_num(measure(pictures, identity).mouth)
