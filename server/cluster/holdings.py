"""A generator slot's books: which front end holds each of its places, until when, and what another front
end needs to take a session over. Plain Python (no Ray), kept by the slot actor (``slot``) under its lock.

    books = Holdings(capacity=1)
    books.reserve("ab12", owner="fe-1", lease_s=10.0)       # False: every place is held
    books.opened("ab12", "fe-1", session, identity=2, seed=7, resumable=note)
    place = books.place("ab12", "fe-1")                      # TakenOver if another front end holds it now
    books.renew("fe-1", 10.0)                                # several times a lease, while it lives
    gone = books.expire()                                    # sessions of front ends that stopped renewing

**Leases.** A front end holds its places only while it renews its lease (``renew``, and every
``reserve`` or ``claim``): a front end that died (killed, its machine lost) cannot close its sessions, so
once its lease has run out its places are free again and its sessions are handed back for closing.
**Claims.** A session opened with a ``Resumable`` note can be claimed by another front end that shows its
resume token; from then on it holds the place, and the first front end's calls are refused.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

from streaming_model.lanes import LaneWorker
from streaming_model.pool import Resumable, TakenOver


class NotHeld(KeyError):
    """The slot holds no such session (closed, never opened here, or its front end's lease ran out)."""


@dataclass
class Place:
    """One place of the slot: reserved by ``owner``, and once opened its session."""

    owner: str
    session: LaneWorker | None = None
    identity: int = 0
    seed: int = 0
    resumable: Resumable | None = None
    saved: Future[tuple[int, bytes]] | None = None
    """The session's latest state being exported (its chunk index, bytes)."""
    notes: dict[str, bytes] = field(default_factory=dict)
    """What the front end keeps with the session (its minds), as of the last chunk made."""


class Holdings:
    """The places of one slot and the leases of the front ends holding them."""

    def __init__(self, capacity: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.capacity = capacity
        self._clock = clock
        self._places: dict[str, Place] = {}
        self._leases: dict[str, float] = {}  # front end -> when its lease runs out

    def __len__(self) -> int:
        """Places held now (sessions open or being opened)."""
        return len(self._places)

    def renew(self, owner: str, lease_s: float) -> None:
        """``owner`` is alive: its places are held for ``lease_s`` more seconds."""
        self._leases[owner] = self._clock() + lease_s

    def reserve(self, key: str, owner: str, lease_s: float) -> bool:
        """Hold a place for session ``key``; False when every place is held (by another session)."""
        self.renew(owner, lease_s)
        place = self._places.get(key)
        if place is not None:
            return place.owner == owner
        if len(self._places) >= self.capacity:
            return False
        self._places[key] = Place(owner)
        return True

    def opened(
        self,
        key: str,
        owner: str,
        session: LaneWorker,
        *,
        identity: int,
        seed: int,
        resumable: Resumable | None,
    ) -> None:
        """Session ``key`` is open in the place ``owner`` reserved for it."""
        place = self.place(key, owner)
        place.session, place.identity, place.seed, place.resumable = session, identity, seed, resumable

    def place(self, key: str, owner: str) -> Place:
        """Session ``key``'s place, which ``owner`` must hold: ``TakenOver`` if another front end holds it
        now, ``NotHeld`` if nobody does."""
        place = self._places.get(key)
        if place is None:
            raise NotHeld(f"session {key} is not held on this slot")
        if place.owner != owner:
            raise TakenOver(f"session {key} has been taken over by another front end")
        return place

    def held_by(self, key: str, owner: str) -> Place | None:
        """Session ``key``'s place if ``owner`` holds it, else None."""
        place = self._places.get(key)
        return place if place is not None and place.owner == owner else None

    def session(self, key: str, owner: str) -> LaneWorker:
        """Session ``key``'s open backend session, behind its chunk steps (``place``'s errors; ``NotHeld``
        if not yet opened)."""
        session = self.place(key, owner).session
        if session is None:
            raise NotHeld(f"session {key} is reserved on this slot but not open")
        return session

    def release(self, key: str, owner: str) -> None:
        """Give up a reservation never opened (an open session is freed by ``close``)."""
        place = self.held_by(key, owner)
        if place is not None and place.session is None:
            del self._places[key]

    def close(self, key: str, owner: str) -> Place | None:
        """Free session ``key``'s place if ``owner`` holds it (else nothing: another front end took it
        over); the place freed, whose session the caller closes."""
        return self._places.pop(key) if self.held_by(key, owner) is not None else None

    def holds(self, key: str) -> bool:
        """Whether session ``key`` is open here with a note that lets another front end claim it."""
        place = self._places.get(key)
        return place is not None and place.session is not None and place.resumable is not None

    def claim(self, key: str, resume_token: str, owner: str, lease_s: float) -> Place | None:
        """Hand session ``key`` to front end ``owner`` if ``resume_token`` is its token: its place (now
        ``owner``'s), or None if there is no such claimable session or the token is wrong."""
        place = self._places.get(key)
        if place is None or place.session is None or place.resumable is None:
            return None
        if not place.resumable.admits(resume_token):
            return None
        self.renew(owner, lease_s)
        place.owner = owner
        return place

    def expire(self) -> list[LaneWorker]:
        """Free the places of every front end whose lease has run out; their open sessions, to close."""
        now = self._clock()
        lapsed = {owner for owner, until in self._leases.items() if until < now}
        if not lapsed:
            return []
        for owner in lapsed:
            del self._leases[owner]
        gone = [key for key, place in self._places.items() if place.owner in lapsed]
        sessions = [s for key in gone if (s := self._places.pop(key).session) is not None]
        return sessions
