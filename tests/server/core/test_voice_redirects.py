"""The Director's speech, once its first audio is ready, regenerates a generated chunk not yet sent
(``[server] voice_redirects``), in virtual time: the session's clock stands still while the model and Piper
work, so whether the speech is ready before the chunk's send is up to the test, not to the machine's speed.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from agent.plans import Block, Source, Speech
from server.core.outputs import AudioOut
from server.sessions import SessionFactory
from server.speech import SpeechConfig
from tests.support.outputs import WAIT_S
from tests.support.stepped import Stepped, stepped_session

pytestmark = pytest.mark.asyncio(loop_scope="module")

WAITING = 2
"""The media chunk generated and waiting unsent when the speech is submitted."""


async def speech_prepared(session: Stepped) -> None:
    """Until the first audio of every speech submitted so far is synthesised (the clock stands still)."""
    async with asyncio.timeout(WAIT_S):
        # The player keeps what it synthesises ahead of a cue; nothing public says when that is done.
        await asyncio.gather(*session.core.player._prepared.values())


def first_voiced_chunk(session: Stepped) -> int | None:
    """The media chunk whose frames carry the first audible sample of the character's voice."""
    audio = [o for o in session.script.outputs if isinstance(o, AudioOut)]
    voiced = next((a.pts_ms for a in audio if np.abs(np.frombuffer(a.pcm, dtype="<i2")).max() > 0), None)
    if voiced is None:
        return None
    return max(v.chunk for v in session.video() if v.pts_ms <= voiced)


@pytest.mark.parametrize(
    ("source", "redirects", "sounds_in"),
    [
        ("director", True, WAITING),  # ready before its send: the waiting chunk is made again with it
        ("director", False, WAITING + 1),  # the switch off: the next chunk's decision cues it
        ("user", True, WAITING + 1),  # the user's (or a script's) speech lands where its inputs say
    ],
)
async def test_the_directors_speech_ready_before_a_waiting_chunks_send_sounds_in_that_chunk(
    world_factory: SessionFactory, source: Source, redirects: bool, sounds_in: int
) -> None:
    speech = SpeechConfig(redirects=redirects)
    async with stepped_session(world_factory, "voice", replace=True, speech=speech) as session:
        await session.run_until(lambda: session.loop_waits_after() == WAITING)
        session.core.minds.realizer.submit(Block(source=source, behaviors=[Speech(text="Hello there.")]))
        await speech_prepared(session)
        if sounds_in == WAITING:
            async with asyncio.timeout(WAIT_S):
                while session.core.replaced == 0:  # noqa: ASYNC110 (the model works in a thread)
                    await asyncio.sleep(0.005)
        await session.run_until(lambda: first_voiced_chunk(session) is not None)
        assert first_voiced_chunk(session) == sounds_in
        assert session.core.replaced == (1 if sounds_in == WAITING else 0)
