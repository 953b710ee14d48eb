"""A generator slot's books (``server.cluster.holdings``), without Ray: places, leases on the front ends'
own clock, and claims by resume token. The sessions are real ``world`` backend sessions on a lane, as in a
slot; the clock is a number the test moves."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from server.cluster.holdings import Holdings, NotHeld
from streaming_model.backends import open_backend
from streaming_model.lanes import Lane, LaneWorker
from streaming_model.pool import Resumable, TakenOver

LEASE_S = 10.0
NOTE = Resumable.of(b'{"type":"session.start","seed":3}', "the-token")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def sessions() -> Iterator[list[LaneWorker]]:
    lane = Lane(open_backend("world", {}), name="books", threads=1, max_batch=1)
    opened = [LaneWorker(lane, identity=0, seed=seed) for seed in range(3)]
    yield opened
    for session in opened:
        session.leave().result()
    lane.stop()


def test_a_slot_holds_as_many_places_as_it_serves_and_a_key_stays_its_front_ends() -> None:
    books = Holdings(2, Clock())
    assert books.reserve("a", "fe-1", LEASE_S) and books.reserve("a", "fe-1", LEASE_S)  # held already
    assert not books.reserve("a", "fe-2", LEASE_S)  # another front end's session of that name
    assert books.reserve("b", "fe-2", LEASE_S)
    assert not books.reserve("c", "fe-1", LEASE_S) and len(books) == 2
    books.release("b", "fe-1")  # not fe-1's to give up
    assert len(books) == 2
    books.release("b", "fe-2")
    assert len(books) == 1 and books.reserve("c", "fe-1", LEASE_S)


def test_the_places_of_a_front_end_that_stopped_renewing_are_freed_once_its_lease_runs_out(
    sessions: list[LaneWorker],
) -> None:
    clock = Clock()
    books = Holdings(4, clock)
    for key, owner, session in zip("abc", ("dead", "dead", "alive"), sessions, strict=True):
        assert books.reserve(key, owner, LEASE_S)
        books.opened(key, owner, session, identity=0, seed=1, resumable=None)
    assert books.reserve("d", "dead", LEASE_S)  # a reservation never opened goes too
    clock.now += 0.75 * LEASE_S
    books.renew("alive", LEASE_S)
    assert books.expire() == [] and len(books) == 4  # nobody's lease has run out yet
    clock.now += 0.5 * LEASE_S
    assert books.expire() == sessions[:2]  # "dead" renewed last 1.25 leases ago: its sessions, to close
    assert len(books) == 1 and books.session("c", "alive") is sessions[2]
    with pytest.raises(NotHeld):
        books.place("a", "dead")
    assert books.close("a", "dead") is None
    # A front end that comes back after its lease ran out starts afresh.
    assert books.reserve("a", "dead", LEASE_S) and len(books) == 2


def test_a_session_is_claimed_with_its_resume_token_and_its_first_front_end_is_refused_from_then_on(
    sessions: list[LaneWorker],
) -> None:
    books = Holdings(1, Clock())
    books.reserve("a", "fe-1", LEASE_S)
    assert not books.holds("a") and books.claim("a", "the-token", "fe-2", LEASE_S) is None  # not open yet
    books.opened("a", "fe-1", sessions[0], identity=2, seed=7, resumable=NOTE)
    assert books.holds("a")
    assert books.claim("a", "another-token", "fe-2", LEASE_S) is None
    assert books.place("a", "fe-1").owner == "fe-1"  # a wrong token changes nothing
    place = books.claim("a", "the-token", "fe-2", LEASE_S)
    assert place is not None and (place.owner, place.session, place.identity, place.seed) == (
        "fe-2",
        sessions[0],
        2,
        7,
    )
    with pytest.raises(TakenOver):
        books.session("a", "fe-1")
    assert books.close("a", "fe-1") is None and len(books) == 1  # fe-1 closing it frees nothing
    assert books.held_by("a", "fe-2") is place
    assert books.close("a", "fe-2") is place and len(books) == 0


def test_a_session_opened_without_a_note_cannot_be_claimed(sessions: list[LaneWorker]) -> None:
    books = Holdings(1, Clock())
    books.reserve("a", "fe-1", LEASE_S)
    books.opened("a", "fe-1", sessions[0], identity=0, seed=1, resumable=None)
    assert not books.holds("a") and books.claim("a", "the-token", "fe-2", LEASE_S) is None
