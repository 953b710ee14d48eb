"""The session core's tests run on the ``world`` backend at its own clock (16 fps, 12-frame 160x96
chunks): the core reads everything from the session's manifest."""

from __future__ import annotations

import pytest

from server.sessions import SessionFactory
from streaming_model.world_backend import WorldBackend, WorldOptions


@pytest.fixture(scope="module")
def world_factory(factory: SessionFactory) -> SessionFactory:
    backend = WorldBackend(WorldOptions(fps=16, chunk_frames=12, width=160, height=96))
    return SessionFactory(backend, factory.voice, factory.hearing)
