"""Fixtures of the Director tests: a real local chat-completions server and a stage that calls it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.agent.stage import Stage, make_stage
from tests.support.llm_server import LLMServer


@pytest.fixture
async def llm() -> AsyncIterator[LLMServer]:
    async with LLMServer() as server:
        yield server


@pytest.fixture
async def stage(llm: LLMServer) -> AsyncIterator[Stage]:
    stage = make_stage(llm)
    yield stage
    await stage.director.stop()
