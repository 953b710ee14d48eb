"""A splice prepared on a hunch (an onset's, a start of speech's): made ahead while the input is confirmed,
shown only if it is, and the frames the same as a splice made on the confirmation; forgotten, every chunk
as it was, when the hunch is dropped. In virtual time (``tests.support.stepped``), as the other splice
tests."""

from __future__ import annotations

import pytest

from events.hunch import Hunch, HunchKind
from events.vocabulary import Event, SoundOnset, SpeechStarted
from server.core.foresight import Foreseen, Foresight
from server.core.outputs import VideoOut
from server.sessions import SessionFactory
from tests.server.core.test_splice import LEAD, PLAYING, SENT, answered, frames_through
from tests.support.stepped import Stepped, stepped_session

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
