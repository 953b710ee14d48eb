"""The session factory: what the sessions it makes share."""

from __future__ import annotations

import pytest

from server import protocol as p
from server.sessions import SessionFactory
from tests.support.llm_server import LLMServer
from tests.support.serving import directed

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def test_the_sessions_directors_share_one_chat_client_that_outlives_each_session(
    factory: SessionFactory,
) -> None:
    async with LLMServer() as llm:
        shared = directed(factory, llm)
        first, _ = await shared.create("first", p.SessionStart(seed=1, director="llm"), "token")
        second, _ = await shared.create("second", p.SessionStart(seed=2, director="llm"), "token")
        try:
            one, other = first.minds.director, second.minds.director
            assert one is not None and other is not None
            # Made once (an SSL context and a connection pool), not once per session on the event loop.
            assert one.client is other.client
            await first.close()
            assert not other.client.is_closed()  # the other session still talks to the LLM
        finally:
            await second.close()
            await shared.close()
        assert other.client.is_closed()
