"""Fixtures every test package may use: the shipped models, loaded once per test run."""

from __future__ import annotations

import pytest

from events.hearing import Hearing
from server.sessions import SessionFactory
from streaming_model.tiny import TinyBackend


@pytest.fixture(scope="session")
def factory() -> SessionFactory:
    """Sessions with the default generator, voice, YAMNet and Whisper (no LLM endpoint)."""
    return SessionFactory(TinyBackend.load(), hearing=Hearing())
