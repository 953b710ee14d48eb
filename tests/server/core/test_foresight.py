"""A splice prepared on a hunch (an onset's, a start of speech's): made ahead while the input is confirmed,
shown only if it is, and the frames the same as a splice made on the confirmation; forgotten, every chunk
as it was, when the hunch is dropped. In virtual time (``tests.support.stepped``), as the other splice
tests."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from events.hunch import Hunch, HunchKind
from events.vocabulary import Event, SoundOnset, SpeechStarted
from server.core.foresight import Foreseen, Foresight
from server.core.outputs import VideoOut
from server.sessions import SessionFactory
from tests.server.core.test_splice import LEAD, PLAYING, SENT, answered, frames_through
from tests.support.stepped import Stepped, measured, stepped_session

pytestmark = pytest.mark.asyncio(loop_scope="module")

FRAMES = 12
"""Frames per chunk of the sessions here (``world_factory``: 16 fps, 62.5 ms a frame, about an onset's
confirmation)."""
AT_MS = 1234.0
"""Where the onset is in the stream (nothing here reads it but the hunch's match with its drop)."""


async def playing(session: Stepped, chunk: int = PLAYING, sent: int = SENT) -> None:
    """Wait until ``sent`` frames of media chunk ``chunk`` are out, the chunk after it held."""
    await session.run_until(lambda: sum(v.chunk == chunk for v in session.video()) == sent)
    await session.until_loop_waits()


def hunch(session: Stepped, kind: HunchKind = "sound.onset", *, dropped: bool = False) -> None:
    """A hunch, as the session's ears tell it."""
    tell = session.core.ears.on_hunch
    assert tell is not None
    tell(Hunch(kind=kind, audio_ms=AT_MS, confirm_ms=65.0, strength_db=30.0, dropped=dropped))


async def made_ahead(session: Stepped, kind: HunchKind = "sound.onset") -> Foreseen:
    """What the session makes ahead on a hunch told now, once made."""
    foresight = session.core.foreseen
    hunch(session, kind)
    await answered(session, lambda: foresight.pending is not None and foresight.pending.job.done())
    assert foresight.pending is not None
    return foresight.pending


async def confirmed(session: Stepped, kind: HunchKind = "sound.onset") -> Event:
    """The event a hunch of ``kind`` expected, published."""
    if kind == "speech.started":
        event: Event = session.core.stamper(SpeechStarted, audio_ms=AT_MS)
    else:
        event = session.core.stamper(SoundOnset, audio_ms=AT_MS, strength_db=30.0)
    await session.core.publish(event)
    return event


async def input_frames(
    world_factory: SessionFactory,
    name: str,
    kind: HunchKind,
    at: tuple[int, int],
    heard: tuple[int, int] | None,
) -> tuple[list[VideoOut], tuple[int, int], Foresight]:
    """A session where an input of ``kind`` is confirmed once ``at`` (chunk, frames sent) and, where
    ``heard``, its hunch was told at ``heard``: its frames through the chunk after the one reflecting it,
    where that is, and its foresight."""
    async with stepped_session(world_factory, name, replace=True, lead=LEAD) as session:
        assert session.core.splice(True)
        if heard is not None:
            await playing(session, *heard)
            await made_ahead(session, kind)
        await playing(session, *at)
        event = await confirmed(session, kind)
        await answered(session, lambda: session.core.spliced + session.core.replaced == 1)
        frames = await frames_through(session, at[0] + 1)
    reflecting = [(v.chunk, v.frame) for v in frames if event.id in v.reflects]
    assert len(reflecting) == 1
    return frames, reflecting[0], session.core.foreseen


@pytest.mark.parametrize("kind", ["sound.onset", "speech.started"])
@pytest.mark.parametrize(
    ("heard", "at"),
    [((PLAYING, 1), (PLAYING, 2)), ((PLAYING, FRAMES - 1), (PLAYING, FRAMES))],
    ids=["spliced into the chunk playing", "in the chunk after it, replaced"],
)
async def test_an_input_confirmed_shows_what_was_made_on_its_hunch_the_same_frames(
    world_factory: SessionFactory, kind: HunchKind, heard: tuple[int, int], at: tuple[int, int]
) -> None:
    # Heard early in a chunk, the input is confirmed while that chunk plays: it is made again ahead. Heard
    # as its last frame goes out, the confirmation finds the chunk after it waiting for its send: that one
    # is.
    foreseen, shows, foresight = await input_frames(world_factory, "foreseen", kind, at, heard)
    assert (foresight.started, foresight.used, foresight.dropped) == (1, 1, 0)
    made_then, shown_then, _ = await input_frames(world_factory, "on confirmation", kind, at, None)
    assert shows == shown_then == (at if at[1] < FRAMES else (at[0] + 1, 0))
    assert [v.jpeg for v in foreseen] == [v.jpeg for v in made_then]


async def test_a_hunch_dropped_is_forgotten_and_every_chunk_is_as_it_was(
    world_factory: SessionFactory,
) -> None:
    async with stepped_session(world_factory, "dropped", replace=True, lead=LEAD) as session:
        assert session.core.splice(True)
        await playing(session, PLAYING, 1)
        ahead = await made_ahead(session)
        assert ahead.index == PLAYING  # its confirmation would have found it playing
        hunch(session, dropped=True)
        frames = await frames_through(session, PLAYING + 2)
    foresight = session.core.foreseen
    assert (foresight.started, foresight.used, foresight.dropped, session.core.spliced) == (1, 0, 1, 0)
    async with stepped_session(world_factory, "alone", replace=True, lead=LEAD) as alone:
        reference = await frames_through(alone, PLAYING + 2)
    assert [v.jpeg for v in frames] == [v.jpeg for v in reference]


async def test_a_hunch_is_not_acted_on_where_the_server_does_not_foresee(
    world_factory: SessionFactory,
) -> None:
    async with stepped_session(world_factory, "off", replace=True, lead=LEAD) as session:
        assert session.core.splice(True)
        session.core.foreseen.on = False  # ConductorConfig(foresee=False)
        await playing(session)
        hunch(session)
        event = await confirmed(session)
        await answered(session, lambda: session.core.spliced == 1)
        frames = await frames_through(session, PLAYING + 1)
    assert session.core.foreseen.started == 0
    assert [(v.chunk, v.frame) for v in frames if event.id in v.reflects] == [(PLAYING, SENT)]


REGENERATION_S = 0.1
"""What a regeneration takes on the slow machine of the test below (set in its schedule): the chunk after
the one playing is handed to the sender 125 ms (with the margin) before its first frame."""
HANDED = PLAYING + 1
"""The chunk playing when that test's hunch comes: the character's idle gaze holds from the chunk after it
into the next one (after chunk ``PLAYING`` it moves, and a confirmation there re-decides that chunk under
another condition than the one made ahead, which is then forgotten)."""


async def test_a_hunch_confirmed_after_the_next_chunk_is_handed_on_has_that_chunk_made_ahead(
    world_factory: SessionFactory,
) -> None:
    # Heard with the playing chunk's last frame still to go out after the confirmation, but the chunk
    # after it handed to the sender before it: a splice can only go into the chunk handed last, so that
    # one is made ahead (the one playing used to be, and was forgotten at the confirmation).
    async with stepped_session(world_factory, "handed", replace=True, lead=LEAD) as session:
        assert session.core.splice(True)
        schedule = session.core.schedule
        measured(schedule.chunk_times, REGENERATION_S)
        await playing(session, HANDED, FRAMES - 2)
        confirmation = schedule.now() + 0.065 + 0.02  # the hunch's confirm_ms and a microphone frame
        assert schedule.hand_at(HANDED + 1) <= confirmation < schedule.frame_at((HANDED + 1) * FRAMES - 1)
        ahead = await made_ahead(session)
        assert ahead.index == HANDED + 1
        await playing(session, HANDED, FRAMES)  # the chunk after it handed on
        event = await confirmed(session)
        await answered(session, lambda: session.core.spliced == 1)
        frames = await frames_through(session, HANDED + 1)
    foresight = session.core.foreseen
    assert (foresight.started, foresight.used, foresight.dropped) == (1, 1, 0)
    assert [(v.chunk, v.frame) for v in frames if event.id in v.reflects] == [(HANDED + 1, 0)]


async def test_a_splice_being_made_ahead_is_counted_ready_in_what_is_left_of_a_typical_making(
    world_factory: SessionFactory,
) -> None:
    # A confirmation that comes while the splice made ahead is still being made splices from the frame it
    # will be ready for, not from the one a whole making started then would reach.
    async with stepped_session(world_factory, "in the making", replace=True, lead=LEAD) as session:
        assert session.core.splice(True)
        schedule = session.core.schedule
        measured(schedule.chunk_times, REGENERATION_S)
        await playing(session)
        foresight = session.core.foreseen
        ahead = await made_ahead(session)
        assert foresight.made_in(ahead.index) == 0.0
        assert foresight.made_in(ahead.index + 1) is None  # none made ahead for it
        begun = asyncio.get_running_loop().create_future()  # the same making, not finished
        foresight.pending = dataclasses.replace(ahead, job=begun, started_at=schedule.now() - 0.04)
        assert foresight.made_in(ahead.index) == pytest.approx(REGENERATION_S - 0.04)
        foresight.pending.started_at = schedule.now() - 2 * REGENERATION_S  # slower than typical
        assert foresight.made_in(ahead.index) == 0.0
        foresight.pending = ahead


async def test_where_no_splice_of_the_chunk_playing_could_show_the_chunk_waiting_is_made_ahead(
    world_factory: SessionFactory,
) -> None:
    # Its frames still to go out after the confirmation, but making a chunk again takes most of a chunk on
    # this (slow) machine: a splice would leave the chunk after it no time to be made again for its send, so
    # the confirmation will replace that one, and that is the one made ahead.
    async with stepped_session(world_factory, "no splice", replace=True, lead=LEAD) as session:
        assert session.core.splice(True)
        schedule = session.core.schedule
        measured(schedule.produce_times, 0.95 * schedule.media.chunk_s)
        await playing(session, PLAYING, 1)
        ahead = await made_ahead(session)
        assert ahead.index == PLAYING + 1
        await playing(session, PLAYING, 2)
        event = await confirmed(session)
        await answered(session, lambda: session.core.replaced == 1)
        frames = await frames_through(session, PLAYING + 1)
    foresight = session.core.foreseen
    assert (foresight.started, foresight.used, foresight.dropped, session.core.spliced) == (1, 1, 0, 0)
    assert [(v.chunk, v.frame) for v in frames if event.id in v.reflects] == [(PLAYING + 1, 0)]
