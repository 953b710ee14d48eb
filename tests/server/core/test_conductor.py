"""The session core driven by a script, with no socket and no wire format: inputs go in as calls, and
what the session says comes out as typed outputs (``server.core.outputs``).

It runs on the ``world`` backend at its own clock (16 fps, 12-frame 160x96 chunks): the core reads
everything from the session's manifest.
"""

from __future__ import annotations

import pytest

from events.vocabulary import Gesture
from server import protocol as p
from server.core.conductor import Conductor, Refused
from server.core.outputs import AudioOut, Unshown, VideoOut
from server.sessions import SessionFactory
from tests.support.outputs import Script

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def session(world_factory: SessionFactory, script: Script) -> Conductor:
    start = p.SessionStart(seed=3, director="none")
    conductor, _ = await world_factory.create("scripted", start, "token")
    await conductor.start(script)
    return conductor


async def test_a_gesture_goes_in_as_an_event_and_comes_out_reflected_by_a_frame(world_factory) -> None:
    script = Script()
    core = await session(world_factory, script)
    try:
        await script.first(lambda o: isinstance(o, VideoOut))
        wave = core.stamper(Gesture, gesture="wave", confidence=1.0)
        await core.publish(wave)
        frame = await script.first(lambda o: isinstance(o, VideoOut) and wave.id in o.reflects)
        assert isinstance(frame, VideoOut) and frame.frame == 0 and (frame.width, frame.height) == (160, 96)
        video = [o for o in script.outputs if isinstance(o, VideoOut)]
        # Frames in order on the session's clock: 12 a chunk, 62.5 ms apart, each after its audio.
        assert [(v.chunk, v.frame) for v in video] == [divmod(n, 12) for n in range(len(video))]
        assert [v.pts_ms for v in video] == [n * 62.5 for n in range(len(video))]
        kinds = [type(o) for o in script.outputs if isinstance(o, (AudioOut, VideoOut))]
        assert kinds[: 2 * len(video)] == [AudioOut, VideoOut] * len(video)
    finally:
        await core.close()


async def test_an_input_that_will_not_show_comes_out_as_an_unshown_with_its_reason(world_factory) -> None:
    script = Script()
    core = await session(world_factory, script)
    try:
        first, second = (core.stamper(Gesture, gesture="wave", confidence=1.0) for _ in range(2))
        await core.publish(first)
        await core.publish(second)  # within the wave reflex's cooldown
        unshown = await script.first(lambda o: isinstance(o, Unshown) and o.event_id == second.id)
        assert isinstance(unshown, Unshown) and unshown.reason == "cooldown"
        await script.first(lambda o: isinstance(o, VideoOut) and first.id in o.reflects)
    finally:
        await core.close()


async def test_what_the_session_cannot_take_is_refused_with_a_reason_and_it_goes_on(world_factory) -> None:
    script = Script()
    core = await session(world_factory, script)
    try:
        with pytest.raises(Refused, match="no story"):
            await core.story_rewind("nowhere")
        with pytest.raises(Refused, match="plan"):
            await core.run_plan({"timeline": [{"at_s": 0, "action": "no_such_action"}]})
        interrupt = await core.interrupt()
        # The interrupt is reflected by a later frame: the session is alive and answering.
        await script.first(lambda o: isinstance(o, VideoOut) and interrupt.id in o.reflects)
    finally:
        await core.close()
