"""A reaction spliced into the chunk playing: for a client that reads ``reflects`` on every frame, an
input that comes while a chunk plays shows from its first frame not yet sent, the frames before it as they
were, and the chunk after it is made again on the new one; in virtual time (``tests.support.stepped``:
the clock stands still while the model works, so a regeneration is ready for the very next frame)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from events.vocabulary import Gesture
from server.core.outputs import VideoOut
from server.sessions import SessionFactory
from tests.support.outputs import WAIT_S
from tests.support.stepped import Stepped, measured, stepped_session

pytestmark = pytest.mark.asyncio(loop_scope="module")

PLAYING = 3
"""The media chunk that plays when the input comes (past the session's first chunks)."""
SENT = 2
"""Frames of it already sent then."""
LEAD = 1.05
"""A little over a whole chunk, as sessions run with replacement (``schedule.lead_for``): the chunk after
the one playing is generated and held while it plays."""


async def wave_while_playing(session: Stepped) -> Gesture:
    """A wave sent once ``SENT`` frames of chunk ``PLAYING`` are out, the chunk after it held."""
    await session.run_until(lambda: sum(v.chunk == PLAYING for v in session.video()) == SENT)
    await session.until_loop_waits()
    wave = session.core.stamper(Gesture, gesture="wave", confidence=1.0)
    await session.core.publish(wave)
    return wave


async def answered(session: Stepped, done: Callable[[], bool]) -> None:
    """Wait, the clock standing still, until the session has answered the input (``done``): moving the
    clock on meanwhile would send frames that a splice was to replace."""
    async with asyncio.timeout(WAIT_S):
        while not done():  # noqa: ASYNC110 (the model works in a thread)
            await asyncio.sleep(0.005)


async def frames_through(session: Stepped, chunk: int) -> list[VideoOut]:
    last = session.core.manifest.frames_per_chunk - 1
    await session.run_until(lambda: any((v.chunk, v.frame) == (chunk, last) for v in session.video()))
    return session.video()


async def test_an_input_while_a_chunk_plays_shows_from_its_next_unsent_frame(
    world_factory: SessionFactory,
) -> None:
    async with stepped_session(world_factory, "spliced", replace=True, lead=LEAD) as session:
        assert session.core.splice(True)
        wave = await wave_while_playing(session)
        await answered(session, lambda: session.core.spliced == 1)
        frames = await frames_through(session, PLAYING + 1)
    reflecting = [v for v in frames if wave.id in v.reflects]
    assert [(v.chunk, v.frame) for v in reflecting] == [(PLAYING, SENT)]  # shown once, mid-chunk
    assert session.core.spliced == 1
    async with stepped_session(world_factory, "alone", replace=True, lead=LEAD) as alone:
        reference = await frames_through(alone, PLAYING + 1)
    sent = {(v.chunk, v.frame): v.jpeg for v in reference}
    before = [v for v in frames if (v.chunk, v.frame) < (PLAYING, SENT)]
    assert before and all(v.jpeg == sent[(v.chunk, v.frame)] for v in before)
    after = [v for v in frames if (v.chunk, v.frame) >= (PLAYING, SENT)]
    assert all(v.jpeg != sent[(v.chunk, v.frame)] for v in after)  # the wave, and the chunk made on it


async def test_a_client_that_does_not_ask_sees_it_from_the_next_chunks_first_frame(
    world_factory: SessionFactory,
) -> None:
    async with stepped_session(world_factory, "unspliced", replace=True, lead=LEAD) as session:
        assert not session.core.splice(False)
        wave = await wave_while_playing(session)
        await answered(session, lambda: session.core.replaced == 1)
        frames = await frames_through(session, PLAYING + 1)
    assert [(v.chunk, v.frame) for v in frames if wave.id in v.reflects] == [(PLAYING + 1, 0)]
    assert (session.core.spliced, session.core.replaced) == (0, 1)


async def test_without_replacement_nothing_is_spliced(world_factory: SessionFactory) -> None:
    async with stepped_session(world_factory, "fixed", replace=False, lead=LEAD) as session:
        assert not session.core.splice(True)


async def test_an_input_that_comes_after_a_chunk_is_handed_over_shows_from_its_next_unsent_frame(
    world_factory: SessionFactory,
) -> None:
    # With 0.9 of a chunk of lead the next chunk starts 0.1 of a chunk after the handed one's first frame:
    # an input that comes in between waits for that chunk's decision, which splices it into the handed one.
    async with stepped_session(world_factory, "handed", replace=True) as session:
        assert session.core.splice(True)
        media = session.core.media
        await session.run_until(lambda: media.handed is not None and media.handed.index == PLAYING)
        wave = session.core.stamper(Gesture, gesture="wave", confidence=1.0)
        await session.core.publish(wave)
        frames = await frames_through(session, PLAYING + 1)
    # Frames 0 and 1 (62.5 ms apart) are out when the next chunk starts, 75 ms after the first.
    assert [(v.chunk, v.frame) for v in frames if wave.id in v.reflects] == [(PLAYING, 2)]
    assert session.core.spliced == 1


async def test_a_worker_that_cannot_splice_gets_no_splices(world_factory: SessionFactory) -> None:
    # As a cluster's slots (server.cluster.remote.RemoteWorker.splices): session.started then says nothing.
    async with stepped_session(world_factory, "no-splice", replace=True, lead=LEAD) as session:
        session.core.worker.splices = False  # type: ignore[misc]  # a ModelWorker's class attribute
        assert not session.core.splice(True)


async def test_a_second_input_while_a_splice_denoises_is_spliced_at_once(
    world_factory: SessionFactory,
) -> None:
    # As a sound's name that comes just after its onset: it used to wait for the splice and for the chunk
    # after it made again, then to be spliced (and that chunk made) a second time.
    async with stepped_session(world_factory, "burst", replace=True, lead=LEAD) as session:
        assert session.core.splice(True)
        worker = session.core.worker
        splice, produce = worker.splice, worker.produce
        calls: list[str] = []
        second: list[Gesture] = []

        async def splicing(*args: Any) -> list[bytes] | None:
            calls.append("splice")
            if not second:  # the user shakes their head while the wave is being spliced
                second.append(session.core.stamper(Gesture, gesture="shake_head", confidence=1.0))
                await session.core.publish(second[0])
            return await splice(*args)

        async def producing(*args: Any) -> list[bytes] | None:
            if calls:  # from the first splice on
                calls.append("produce")
            return await produce(*args)

        worker.splice = splicing  # type: ignore[method-assign,assignment]
        worker.produce = producing  # type: ignore[assignment]
        wave = await wave_while_playing(session)
        await answered(session, lambda: calls.count("produce") >= 1)
        frames = await frames_through(session, PLAYING + 1)
    assert calls[:3] == ["splice", "splice", "produce"]  # spliced again at once; the chunk after made once
    assert session.core.spliced == 2
    for event in (wave, second[0]):
        assert [(v.chunk, v.frame) for v in frames if event.id in v.reflects] == [(PLAYING, SENT)]


async def test_an_input_too_late_to_change_the_next_chunk_is_spliced_into_it(
    world_factory: SessionFactory,
) -> None:
    # A machine on which regenerating the chunk held no longer fits before its send (the margin on a
    # regeneration's typical time) while a splice, which needs no margin, does: the input used to wait for
    # the chunk after it.
    async with stepped_session(world_factory, "missed", replace=True, lead=LEAD) as session:
        assert session.core.splice(True)
        await session.run_until(lambda: sum(v.chunk == PLAYING for v in session.video()) == SENT)
        await session.until_loop_waits()
        schedule = session.core.schedule
        schedule.chunk_times.clear()
        schedule.chunk_times.extend([0.001] * 9)  # a typical regeneration: 1 ms
        schedule.redirect_margin = 2 * schedule.media.chunk_s / schedule.typical()  # two chunks, with it
        assert not schedule.time_to_redo(PLAYING + 1)
        wave = session.core.stamper(Gesture, gesture="wave", confidence=1.0)
        await session.core.publish(wave)
        frames = await frames_through(session, PLAYING + 2)
    # Spliced into the chunk after the one playing, at whichever frame is first unsent when the splice is
    # ready (moving the clock on to that chunk's frames lets some go out meanwhile), not a chunk later.
    assert [v.chunk for v in frames if wave.id in v.reflects] == [PLAYING + 1]
    assert session.core.spliced == 1


async def test_slow_decisions_do_not_keep_a_splice_out(world_factory: SessionFactory) -> None:
    # What a decision takes (its redirects, and the splice of an earlier reaction: every reaction adds one)
    # is not what making the chunk after a splice again takes, a plain generation; a session with many
    # reactions used to refuse splices once a twentieth of its recent decisions had been slow.
    async with stepped_session(world_factory, "slow decisions", replace=True, lead=LEAD) as session:
        assert session.core.splice(True)
        await session.run_until(lambda: sum(v.chunk == PLAYING for v in session.video()) == SENT)
        await session.until_loop_waits()
        schedule = session.core.schedule
        assert len(schedule.produce_times) >= PLAYING  # each chunk's generation timed, its commit with it
        measured(schedule.made_times, schedule.media.chunk_s)
        wave = session.core.stamper(Gesture, gesture="wave", confidence=1.0)
        await session.core.publish(wave)
        await answered(session, lambda: session.core.spliced == 1)
        frames = await frames_through(session, PLAYING + 1)
    assert [(v.chunk, v.frame) for v in frames if wave.id in v.reflects] == [(PLAYING, SENT)]
