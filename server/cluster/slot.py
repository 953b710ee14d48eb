"""A generator slot: a Ray actor that loads the backend once and serves the sessions reserved on it.

    slot = GeneratorSlot.options(resources={"onstage_slot": 1}).remote("tiny", {}, 1, 1, 4)
    ok = await slot.reserve.remote("ab12", "fe-1", 10.0)       # False: the slot is full
    await slot.open.remote("ab12", "fe-1", identity=2, seed=7, resumable=note)
    jpegs, finish_s, commit_s = await slot.produce.remote("ab12", "fe-1", 0, cond, finish, notes)
    slot.cancel.remote("ab12", "fe-1", 0)                       # lands while produce runs
    slot.renew.remote("fe-1", 10.0)                             # front end fe-1 is alive
    index, state = await slot.saved.remote("ab12", "fe-1", -1)  # the latest saved state, or None
    await other_slot.adopt.remote("ab12", "fe-1", 2, 7, state, conds, note, notes)   # continue it there
    claim = await slot.claim.remote("ab12", resume_token, "fe-2", 10.0)       # front end fe-2 takes it

Every session call names the front end making it (``owner``): the slot's books (``holdings``) say which
front end holds each place, and refuse (``TakenOver``) the calls of one whose session another front end
has claimed. Everything a session's model does runs on the slot's lane (``streaming_model.lanes``: one
thread, as a device serves one step at a time) in the order asked, with the model worker's own steps
(``streaming_model.producer``: a chunk is committed when the next one is produced, so a replacement is a
plain regeneration); ``finish`` runs there, so encoded pictures travel, not arrays. ``produce`` and
``replace`` come in on threads of their own (``chunks``), so the chunks of several sessions that fall due
together wait in the lane together and, where the backend batches, are made as one batch (one forward
for all, each session with its own state); the other session calls (open, adopt, capture, restore, claim,
close) take turns on the actor's default thread and queue in the lane between chunks. Reservations,
leases, cancels and questions (``reserve``, ``renew``, ``release``, ``cancel``, ``held``, ``holds``,
``saved``, ``generating``, ``where``, ``manifest``) run in the ``control`` concurrency group, so a cancel
reaches a chunk mid-generation. A cancel may arrive before its call starts (it is kept for it) or after it
ended (then it is dropped when that session's next call comes).

Leases: a front end renews its lease on every slot several times a lease; when one stops (killed), the
next control call after its lease ran out frees its places, and its sessions are closed on the chunk
thread (``reap``), after the chunk in flight.

Saved states, for a session to survive its slot's death: every ``snapshot_every`` chunks, as a ``produce``
begins (every chunk before it is final then: only the last committed chunk is ever replaced, and never
once the next is being made), the session is snapshotted (a copy, well under a millisecond) and the
snapshot is exported to bytes on a thread of its own, off the chunk's way (taking it commits the chunk
produced last, which the produce would commit first anyway). The front end fetches them
(``saved``) and, if this actor dies, has another slot ``adopt`` the session: the saved state, then the
chunks committed since, regenerated under their conditions.

A claim (a client resumed the session through another front end) runs on the chunk thread, so it comes
between two chunks: the session's state then is final, and the claiming front end gets it (exported) with
the session's note, so that it can move the session on its own if this slot dies. A chunk call may carry
the front end's notes (its minds after deciding that chunk, ``agent.handover``): they are kept once the
chunk is made (a cancelled call's are not), so the claim hands over the minds that match the generator.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Literal, TypeVar

import msgspec
import numpy as np
import ray
import torch

from server.cluster.holdings import Holdings, Place
from streaming_model.backend import BackendManifest
from streaming_model.backends import open_backend
from streaming_model.condition import ChunkCondition
from streaming_model.lanes import Lane, LaneWorker
from streaming_model.pool import Resumable

T = TypeVar("T")


class SlotClaim(msgspec.Struct, frozen=True, kw_only=True):
    """A session handed to the front end that claimed it: the note it was opened with, its character and
    seed, the chunk its generator makes next, and its state there (the backend's bytes; None for a
    backend without snapshots)."""

    note: bytes
    identity: int
    seed: int
    index: int
    state: bytes | None
    notes: dict[str, bytes] = {}
    """What the front end that had it kept with its last chunk made (``produce``'s ``notes``)."""


MAX_TOGETHER = 8
"""The most chunk calls a slot takes in at once (its ``chunks`` threads), so the largest batch it makes."""


@ray.remote(concurrency_groups={"control": 2, "chunks": MAX_TOGETHER})  # type: ignore[call-overload]
class GeneratorSlot:
    """One slot: the backend, and the sessions of the front ends that reserved it."""

    def __init__(
        self, backend: str, options: dict[str, str], sessions: int, threads: int, snapshot_every: int
    ) -> None:
        torch.set_num_threads(threads)
        self._backend = open_backend(backend, options)
        # The sessions' model work, on one thread; their chunks batched where the backend batches.
        self._lane = Lane(self._backend, name="slot", threads=threads, max_batch=min(sessions, MAX_TOGETHER))
        self._every = snapshot_every
        self._exporter = ThreadPoolExecutor(1, thread_name_prefix="export")
        self._lock = threading.Lock()
        self._books = Holdings(sessions)
        self._reaping: list[LaneWorker] = []  # sessions of lapsed front ends, to close
        self._flags: dict[tuple[str, str, int], threading.Event] = {}
        self._generating: tuple[str, int] | None = None

    # ------------------------------------------------------------------------------ control group

    @ray.method(concurrency_group="control")
    def manifest(self) -> BackendManifest:
        """What the slot's backend declares (costs as measured at its warm-up, here)."""
        return self._backend.manifest

    @ray.method(concurrency_group="control")
    def where(self) -> tuple[str, int]:
        """The Ray node id and the process id serving this slot."""
        return ray.get_runtime_context().get_node_id(), os.getpid()

    @ray.method(concurrency_group="control")
    def reserve(self, key: str, owner: str, lease_s: float) -> bool:
        """Hold a place for session ``key`` of front end ``owner``; False when the slot serves as many as
        it may."""
        self._sweep()
        with self._lock:
            return self._books.reserve(key, owner, lease_s)

    @ray.method(concurrency_group="control")
    def renew(self, owner: str, lease_s: float) -> None:
        """Front end ``owner`` is alive: what it holds here stays its for ``lease_s`` more seconds."""
        with self._lock:
            self._books.renew(owner, lease_s)
        self._sweep()

    @ray.method(concurrency_group="control")
    def held(self) -> int:
        """Places held now (sessions open or being opened), once lapsed leases are freed."""
        self._sweep()
        with self._lock:
            return len(self._books)

    @ray.method(concurrency_group="control")
    def holds(self, key: str) -> bool:
        """Whether session ``key`` is open here and may be claimed by another front end."""
        self._sweep()
        with self._lock:
            return self._books.holds(key)

    @ray.method(concurrency_group="control")
    def release(self, key: str, owner: str) -> None:
        """Give up a reservation whose session was never opened (an open session frees it on ``close``)."""
        with self._lock:
            self._books.release(key, owner)

    @ray.method(concurrency_group="control")
    def cancel(self, key: str, owner: str, call: int) -> None:
        """Stop session ``key``'s chunk call ``call`` at the backend's next interrupt point."""
        self._flag(key, owner, call).set()

    @ray.method(concurrency_group="control")
    def saved(self, key: str, owner: str, newer_than: int) -> tuple[int, bytes] | None:
        """Session ``key``'s latest exported state, (its chunk index, bytes), if newer than ``newer_than``
        (None too when ``owner`` no longer holds it)."""
        with self._lock:
            place = self._books.held_by(key, owner)
            job = place.saved if place is not None else None
        if job is None or not job.done() or job.exception() is not None:
            return None
        index, state = job.result()
        return (index, state) if index > newer_than else None

    @ray.method(concurrency_group="control")
    def places(self) -> int:
        """How many sessions this slot serves at once (its maker's ``sessions_per_slot``)."""
        return self._books.capacity

    @ray.method(concurrency_group="control")
    def batches(self) -> list[int]:
        """Sizes of the recent batches of chunks (1: a chunk alone)."""
        return list(self._lane.batches)

    @ray.method(concurrency_group="control")
    def generating(self) -> tuple[str, int] | None:
        """The (session, call) being generated now, if any."""
        return self._generating

    # ------------------------------------------------------------------------------ default group

    def open(
        self, key: str, owner: str, identity: int, seed: int, resumable: Resumable | None = None
    ) -> None:
        """Open (prefill) session ``key``, for which ``owner`` must hold a reservation; ``resumable``:
        what lets another front end claim it."""
        with self._lock:
            self._books.place(key, owner)
        session = LaneWorker(self._lane, identity=identity, seed=seed)
        try:
            session.producer  # noqa: B018 (waits until it is open: its errors are raised here)
        except BaseException:
            session.leave()
            raise
        with self._lock:
            self._books.opened(key, owner, session, identity=identity, seed=seed, resumable=resumable)

    def adopt(
        self,
        key: str,
        owner: str,
        identity: int,
        seed: int,
        state: object | None,
        conds: list[ChunkCondition],
        resumable: Resumable | None = None,
        notes: dict[str, bytes] | None = None,
    ) -> None:
        """Take over session ``key`` from a slot that died: open it (``owner`` must hold a reservation),
        restore its saved ``state`` (None: it had none, it starts fresh) and regenerate the chunks committed
        since, under their conditions ``conds``; deterministic backends come out exactly where it was.
        ``notes``: what the front end keeps with it, as of the last of those chunks."""
        self.open(key, owner, identity, seed, resumable)
        with self._lock:
            session = self._books.session(key, owner)
            self._books.place(key, owner).notes.update(notes or {})
        if state is not None:
            session.call(lambda: session.producer.restore_state(state)).result()
        for cond in conds:
            session.submit_produce(cond, threading.Event(), _discard).result()

    @ray.method(concurrency_group="chunks")
    def produce(
        self,
        key: str,
        owner: str,
        call: int,
        cond: ChunkCondition,
        finish: Callable[[np.ndarray], T],
        notes: dict[str, bytes] | None = None,
    ) -> tuple[T | None, float | None, float]:
        """``Producer.produce`` for session ``key``: the finished chunk (None if cancelled), the seconds
        finishing took, and the seconds committing the chunk before it took. ``notes`` are kept with the
        session once the chunk is made."""
        with self._lock:
            place = self._books.place(key, owner)
        if place.session is not None and place.session.producer.index % self._every == 0:
            self._save(place, place.session)
        return self._chunk("produce", key, owner, call, cond, finish, notes)

    @ray.method(concurrency_group="chunks")
    def replace(
        self,
        key: str,
        owner: str,
        call: int,
        cond: ChunkCondition,
        finish: Callable[[np.ndarray], T],
        notes: dict[str, bytes] | None = None,
    ) -> tuple[T | None, float | None, float]:
        """``Producer.replace`` for session ``key``, as ``produce``."""
        return self._chunk("replace", key, owner, call, cond, finish, notes)

    def capture(self, key: str, owner: str) -> bytes:
        """Session ``key``'s state as portable bytes (what a story store or another slot takes)."""
        with self._lock:
            session = self._books.session(key, owner)
        return session.call(session.producer.export).result()

    def restore(self, key: str, owner: str, state: object) -> int:
        """Continue session ``key`` from a stored state; the chunk index it continues at."""
        with self._lock:
            place = self._books.place(key, owner)
            session = self._books.session(key, owner)
            place.saved = None  # of another history
        producer = session.producer

        def restored() -> int:
            producer.restore_state(state)
            return producer.index

        return session.call(restored).result()

    def claim(self, key: str, resume_token: str, owner: str, lease_s: float) -> SlotClaim | None:
        """Hand session ``key`` to front end ``owner`` if ``resume_token`` is its token (the front end that
        held it is refused from now on); None if it is not here, not claimable, or the token is wrong.
        Runs between two chunks, so the state handed over is final."""
        self._sweep()
        with self._lock:
            place = self._books.claim(key, resume_token, owner, lease_s)
            if place is None:
                return None
            place.saved = None  # the new owner starts from the state handed over now
        session, resumable = place.session, place.resumable
        assert session is not None and resumable is not None  # (a claimable place has both)
        exports = self._backend.manifest.capabilities.snapshots != "none"
        producer = session.producer
        index, state = session.call(lambda: (producer.index, producer.export() if exports else None)).result()
        return SlotClaim(
            note=resumable.note,
            identity=place.identity,
            seed=place.seed,
            index=index,
            state=state,
            notes=dict(place.notes),
        )

    def close(self, key: str, owner: str) -> None:
        """Close session ``key`` and free its place, if ``owner`` holds it. Idempotent."""
        with self._lock:
            place = self._books.close(key, owner)
            for flag in [f for f in self._flags if f[:2] == (key, owner)]:
                del self._flags[flag]
        if place is not None and place.session is not None:
            place.session.leave().result()

    def reap(self) -> None:
        """Close the sessions of front ends whose lease ran out (their places are free already)."""
        with self._lock:
            sessions, self._reaping = self._reaping, []
        for session in sessions:
            session.leave().result()

    # ------------------------------------------------------------------------------ inside

    def _sweep(self) -> None:
        """Free the places of front ends whose lease ran out; their sessions are closed on the chunk
        thread (``reap``), after the chunk in flight, which may be one of theirs."""
        with self._lock:
            gone = self._books.expire()
            self._reaping += gone
        if gone:
            ray.get_runtime_context().current_actor.reap.remote()

    def _save(self, place: Place, session: LaneWorker) -> None:
        """Snapshot ``session`` in the lane (a copy) and export it on the export thread."""
        if self._backend.manifest.capabilities.snapshots == "none":
            return
        producer = session.producer
        index, snap = session.call(lambda: (producer.index, producer.snapshot())).result()
        job = self._exporter.submit(lambda: (index, producer.session.export_state(snap)))
        with self._lock:
            place.saved = job

    def _flag(self, key: str, owner: str, call: int) -> threading.Event:
        with self._lock:
            return self._flags.setdefault((key, owner, call), threading.Event())

    def _chunk(
        self,
        step: Literal["produce", "replace"],
        key: str,
        owner: str,
        call: int,
        cond: ChunkCondition,
        finish: Callable[..., T],
        notes: dict[str, bytes] | None,
    ) -> tuple[T | None, float | None, float]:
        with self._lock:
            place = self._books.place(key, owner)
            session = self._books.session(key, owner)
            # Cancels that came after their call ended are no longer wanted.
            for old in [f for f in self._flags if f[:2] == (key, owner) and f[2] < call]:
                del self._flags[old]
        cancel = self._flag(key, owner, call)
        submit = session.submit_produce if step == "produce" else session.submit_replace
        self._generating = (key, call)
        try:
            out = submit(cond, cancel, finish).result()
        finally:
            self._generating = None
            with self._lock:
                self._flags.pop((key, owner, call), None)
        if out is not None and notes:
            with self._lock:
                place.notes.update(notes)
        finish_s = session.finish_times[-1] if out is not None else None
        commit_s = session.commit_times[-1] if step == "produce" and session.commit_times else 0.0
        return out, finish_s, commit_s


def _discard(frames: np.ndarray) -> None:
    """A regenerated chunk's frames: nobody sees them again."""
    return None
