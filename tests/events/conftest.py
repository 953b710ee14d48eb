"""Fixtures the listener tests share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from events.transcriber import Transcriber, TranscriberConfig, WhisperConfig


@pytest.fixture(scope="session")
def whisper() -> Iterator[Transcriber]:
    """The bundled Whisper tiny.en, loaded once for every test that transcribes."""
    transcriber = Transcriber(TranscriberConfig(whisper=WhisperConfig(cpu_threads=2)))
    transcriber.load()
    yield transcriber
    transcriber.close()
