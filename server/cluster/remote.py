"""The front end's side of generator workers on Ray: a pool of slot actors and a remote worker per session.

    pool = await asyncio.to_thread(RaySlots.connect, ClusterSettings(address="local"), "tiny", {})
    worker = await pool.open(identity=2, seed=7, name="ab12")     # NoFreeSlot when every slot is taken
    jpegs = await worker.produce(cond, cancel, finish)             # cancel.set() reaches the actor
    claimed = await pool.claim("cd34", resume_token)               # another front end's session, now ours
    await worker.close(); await pool.close()

``connect`` joins (or starts) Ray, makes sure every ``onstage_slot`` of the cluster has its named actor
(``slot-0``, ``slot-1``, ... in the ``onstage`` namespace, detached: several front ends share them, and
they outlive the front end that made them) and waits until they have loaded the backend. A session's slot
is reserved in the actor itself, so two front ends can never both take the last one. Each pool is a front
end of its own to the slots (``owner``, a random id) and renews its lease on every slot while it is open.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import secrets
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import numpy as np
import ray
from ray.actor import ActorHandle
from ray.exceptions import RayActorError

from server.cluster.settings import SLOT_RESOURCE, ClusterSettings
from server.cluster.slot import GeneratorSlot, SlotClaim
from streaming_model.backend import BackendManifest
from streaming_model.condition import ChunkCondition
from streaming_model.pool import Claimed, NoFreeSlot, Resumable
from streaming_model.producer import Ahead
from streaming_model.worker import Cancel, WorkerMoved

T = TypeVar("T")

NAMESPACE = "onstage"


class ClusterError(RuntimeError):
    """The cluster cannot serve generators (no slots declared, or they did not come up); says why."""


class RemoteWorker:
    """A ``GeneratorWorker`` whose session lives in a slot actor: the conductor's calls become actor calls,
    a set ``Cancel`` becomes the actor's ``cancel`` (its own concurrency group, so it lands mid-chunk).

    It survives its slot's death: it keeps the session's latest saved state (fetched from the actor in
    the background after each chunk the actor saved one for, never waited for) and the conditions of the
    chunks committed since; when a call finds the actor dead, another slot adopts the session from there
    and the call is made again, and ``on_moved`` says so.

    A worker made by a claim (``RaySlots.claim``) starts at the claimed session's chunk ``start``, with the
    state handed over there as its saved state."""

    def __init__(
        self,
        pool: RaySlots,
        slot: ActorHandle,
        node: str,
        key: str,
        identity: int,
        seed: int,
        resumable: Resumable | None = None,
        start: tuple[int, bytes | None] = (0, None),
        notes: dict[str, bytes] | None = None,
    ) -> None:
        self.pool = pool
        self.slot = slot
        self.node = node
        """The Ray node the session's generator runs on."""
        self.key = key
        self.identity = identity
        self.seed = seed
        self.resumable = resumable
        """What lets another front end claim the session (it goes with the session when it moves)."""
        self.manifest = pool.manifest
        self.finish_times: deque[float] = deque(maxlen=200)
        """Seconds each chunk took in the actor from denoised to finished (decode, ``finish``)."""
        self.commit_times: deque[float] = deque(maxlen=200)
        """Seconds each produce spent in the actor committing the chunk before it."""
        self.on_moved: Callable[[WorkerMoved], None] | None = None
        self.paused = False
        """Set by the session while its client is away (``GeneratorWorker.paused``)."""
        self._calls = itertools.count()
        self._closed = False
        self._first, state = start  # the chunk this front end's part of the session began at
        self._index = self._first  # chunks committed
        # The latest saved state and its chunk index.
        self._saved: tuple[int, object] | None = (self._first, state) if state is not None else None
        self._since: dict[int, ChunkCondition] = {}  # conditions of the chunks committed after it
        self._fetching: asyncio.Task[None] | None = None
        self._history = 0  # goes up when the session is restored: a state fetched before is of another
        self._notes: dict[str, bytes] = {}  # kept, not yet sent with a chunk made
        self._made_notes: dict[str, bytes] = dict(notes or {})  # what the slot keeps (the last chunk made)

    @property
    def hands_over(self) -> bool:
        """Whether another front end could claim the session (it was opened with a ``Resumable`` note)."""
        return self.resumable is not None

    def keep(self, notes: Mapping[str, bytes]) -> None:
        """Send ``notes`` with the next chunk call; the slot keeps them once that chunk is made."""
        self._notes.update(notes)

    async def produce(
        self, cond: ChunkCondition, cancel: Cancel, finish: Callable[[np.ndarray], T]
    ) -> T | None:
        """The next chunk, generated and finished in the actor (the one before it committed first); None if
        cancelled first."""
        out = await self._chunk("produce", cond, cancel, finish)
        if out is not None:
            self._since[self._index] = cond
            self._index += 1
            if (self._index - 1) % self.pool.snapshot_every == 0:
                self._fetch_saved()  # the actor saved the state this chunk began from
        return out

    async def replace(
        self, cond: ChunkCondition, cancel: Cancel, finish: Callable[[np.ndarray], T]
    ) -> T | None:
        """The last produced chunk again under ``cond``, in the actor; None (nothing changed) if cancelled."""
        out = await self._chunk("replace", cond, cancel, finish)
        if out is not None:
            self._since[self._index - 1] = cond
        return out

    splices = False
    """A cluster's slot does not splice (``splice``)."""

    async def splice(
        self, chunk: int, cond: ChunkCondition, cancel: Cancel, finish: Callable[[np.ndarray], T]
    ) -> T | None:
        """None: a cluster's slot does not splice (the state it last saved may hold the chunk a splice would
        make again)."""
        return None

    async def foresee(
        self, chunk: int, cond: ChunkCondition, cancel: Cancel, finish: Callable[[np.ndarray], T]
    ) -> tuple[T, Ahead] | None:
        """None: a cluster's slot does not splice."""
        return None

    async def adopt(self, ahead: Ahead) -> bool:
        """False: a cluster's slot makes no splice ahead."""
        return False

    async def capture(self) -> bytes:
        """The committed state, as the backend's portable bytes."""
        result: bytes = await self._call(lambda slot: slot.capture.remote(self.key, self.pool.owner))
        return result

    async def restore_state(self, state: object) -> None:
        """Continue from a stored state (bytes, or an older checkpoint's snapshot object)."""
        self._index = await self._call(lambda slot: slot.restore.remote(self.key, self.pool.owner, state))
        self._saved, self._since = (self._index, state), {}
        self._history += 1

    async def close(self) -> None:
        """Close the session in the actor, freeing the slot (unless another front end has claimed it).
        Idempotent; a dead actor has nothing to free."""
        if self._closed:
            return
        self._closed = True
        if self._fetching is not None:
            self._fetching.cancel()
        with contextlib.suppress(RayActorError):
            await self.slot.close.remote(self.key, self.pool.owner)

    async def _chunk(
        self, method: str, cond: ChunkCondition, cancel: Cancel, finish: Callable[[np.ndarray], T]
    ) -> T | None:
        call, owner = next(self._calls), self.pool.owner
        notes = dict(self._notes)

        def submit(slot: ActorHandle) -> Any:
            # The listener runs on the thread that sets the flag; submitting an actor call does not wait.
            ref = getattr(slot, method).remote(self.key, owner, call, cond, finish, notes or None)
            cancel.when_set(lambda: slot.cancel.remote(self.key, owner, call))
            return ref

        out, finish_s, commit_s = await self._call(submit)
        if out is not None:  # made: the slot keeps the notes now (a later keep of a name stays to send)
            self._made_notes.update(notes)
            for name, note in notes.items():
                if self._notes.get(name) is note:
                    del self._notes[name]
        if finish_s is not None:
            self.finish_times.append(finish_s)
        if method == "produce":
            self.commit_times.append(commit_s)
        result: T | None = out
        return result

    async def _call(self, submit: Callable[[ActorHandle], Any]) -> Any:
        """``submit(slot)``'s result; if the slot's actor died, move the session and submit again."""
        while True:
            slot = self.slot
            try:
                return await submit(slot)
            except RayActorError:
                if self._closed:
                    raise
                if self.slot is slot:  # (another call may have moved it already)
                    await self._move()

    def _fetch_saved(self) -> None:
        """Fetch the actor's latest saved state in the background (one fetch at a time)."""
        if self._fetching is None or self._fetching.done():
            self._fetching = asyncio.get_running_loop().create_task(self._fetch(self.slot))

    async def _fetch(self, slot: ActorHandle) -> None:
        newer_than = self._saved[0] if self._saved is not None else -1
        history = self._history
        with contextlib.suppress(RayActorError):
            saved = await slot.saved.remote(self.key, self.pool.owner, newer_than)
            if saved is not None and slot is self.slot and history == self._history:
                self._saved = saved
                self._since = {i: c for i, c in self._since.items() if i >= saved[0]}

    async def _move(self) -> None:
        """Have another slot adopt the session from its saved state (``NoFreeSlot`` if none is free)."""
        noticed = time.perf_counter()
        dead = self.slot
        if self._fetching is not None:
            self._fetching.cancel()
        try:
            slot, node = await self.pool.reserve(self.key, exclude=dead)
        except NoFreeSlot:
            raise NoFreeSlot(
                f"the session's generator worker died and no other generator slot is free"
                f" ({len(self.pool.slots)} in the cluster); start a new session later"
            ) from None
        # Without a saved state it starts afresh, replaying every chunk if this front end saw them all (a
        # session claimed from another front end on a backend without snapshots cannot be replayed).
        start, state = self._saved if self._saved is not None else (self._first, None)
        from_start = state is None and self._first == 0
        replayable = state is not None or from_start
        replay = [self._since[i] for i in range(start, self._index)] if replayable else []
        owner = self.pool.owner
        await slot.adopt.remote(
            self.key, owner, self.identity, self.seed, state, replay, self.resumable, self._made_notes
        )
        self.slot, self.node = slot, node
        caps = self.manifest.capabilities
        moved = WorkerMoved(
            gen_chunk=self._index,
            frozen_ms=round(1000.0 * (time.perf_counter() - noticed), 1),
            replayed=len(replay),
            exact=caps.deterministic and (from_start or (state is not None and caps.snapshots == "exact")),
        )
        if self.on_moved is not None:
            self.on_moved(moved)


def _ask_up(actor: ActorHandle, method: str, deadline: float) -> Any:
    """``actor``'s answer to ``method``, waiting through its restart (a slot whose process died comes
    back, and a front end may join the cluster just then) until ``deadline`` (then ``GetTimeoutError``)."""
    while True:
        try:
            return ray.get(getattr(actor, method).remote(), timeout=max(deadline - time.monotonic(), 0.0))
        except ray.exceptions.ActorUnavailableError:
            if time.monotonic() >= deadline:
                raise ray.exceptions.GetTimeoutError(f"slot {method} unanswered: restarting") from None
            time.sleep(0.1)


class RaySlots:
    """A ``WorkerPool`` of the cluster's generator slots."""

    def __init__(
        self,
        slots: list[tuple[ActorHandle, str]],
        manifest: BackendManifest,
        owns_ray: bool,
        snapshot_every: int = ClusterSettings().snapshot_every,
        lease_s: float = ClusterSettings().lease_s,
        sessions_per_slot: int = ClusterSettings().sessions_per_slot,
    ) -> None:
        """``slots``: the actors and their nodes, interleaved by node so sessions spread over nodes;
        ``snapshot_every``: the actors' (when to fetch a session's saved state); ``lease_s``: how long the
        slots hold this front end's places after its last renewal; ``sessions_per_slot``: the most sessions
        a slot serves at once."""
        self.slots = slots
        self.snapshot_every = snapshot_every
        self.lease_s = lease_s
        self.owner = secrets.token_hex(8)
        """This front end, to the slots."""
        self._manifest = manifest
        self.batching = sessions_per_slot > 1 and manifest.capabilities.batching != "none"
        """Whether the slots batch their sessions' chunks (several sessions a slot, a backend that batches):
        then the front end starts its sessions on a shared grid, as in process."""
        self._owns_ray = owns_ray
        self._renewing: asyncio.Task[None] | None = None

    @property
    def manifest(self) -> BackendManifest:
        return self._manifest

    @classmethod
    def connect(cls, settings: ClusterSettings, backend: str, options: dict[str, str]) -> RaySlots:
        """Join the cluster (or start Ray here for ``local``; use the connection already made if there is
        one) and bring up a slot actor per ``onstage_slot``. Blocks: call it in a thread."""
        settings.check()
        owns = not ray.is_initialized()
        if owns and settings.address == "local":
            ray.init(
                num_cpus=settings.local_slots,
                resources={SLOT_RESOURCE: settings.local_slots},
                include_dashboard=False,
                namespace=NAMESPACE,
            )
        elif owns:
            ray.init(address=settings.address, namespace=NAMESPACE)
        try:
            return cls._bring_up(settings, backend, options, owns)
        except BaseException:
            if owns:
                ray.shutdown()
            raise

    @classmethod
    def _bring_up(
        cls, settings: ClusterSettings, backend: str, options: dict[str, str], owns: bool
    ) -> RaySlots:
        total = int(ray.cluster_resources().get(SLOT_RESOURCE, 0))
        if total < 1:
            raise ClusterError(
                f"the Ray cluster declares no {SLOT_RESOURCE} resource: start its worker nodes with"
                f" --resources '{{\"{SLOT_RESOURCE}\": N}}' (N generator slots each)"
            )
        actors = [
            GeneratorSlot.options(  # type: ignore[attr-defined]
                name=f"slot-{i}",
                namespace=NAMESPACE,
                get_if_exists=True,
                lifetime="detached",  # it serves every front end, and outlives the one that made it
                resources={SLOT_RESOURCE: 1},
                num_cpus=0,  # the slot resource is what places it
                max_restarts=-1,  # a slot whose process died comes back (empty: its sessions moved)
            ).remote(backend, options, settings.sessions_per_slot, settings.threads, settings.snapshot_every)
            for i in range(total)
        ]
        deadline = time.monotonic() + settings.start_timeout_s
        try:
            places = [_ask_up(a, "where", deadline) for a in actors]
            manifests = [_ask_up(a, "manifest", deadline) for a in actors]
            # What the slots were made with (by the first front end), not this one's settings.
            per_slot = max(_ask_up(a, "places", deadline) for a in actors)
        except ray.exceptions.GetTimeoutError:
            raise ClusterError(
                f"the {total} generator slot actors were not all up within {settings.start_timeout_s:g} s"
            ) from None
        if any(m.vocabulary != manifests[0].vocabulary for m in manifests):
            raise ClusterError("the cluster's slots serve different backends (another front end's?)")
        by_node: dict[str, list[ActorHandle]] = {}
        for actor, (node, _) in zip(actors, places, strict=True):
            by_node.setdefault(node, []).append(actor)
        columns = [[(actor, node) for actor in group] for node, group in by_node.items()]
        interleaved = [pair for row in itertools.zip_longest(*columns) for pair in row if pair is not None]
        return cls(
            interleaved,
            manifests[0],
            owns,
            settings.snapshot_every,
            settings.lease_s,
            per_slot,
        )

    async def open(
        self, *, identity: int, seed: int, name: str, resumable: Resumable | None = None
    ) -> RemoteWorker:
        """Reserve a free slot for session ``name`` and open its session there (prefilled in the actor)."""
        slot, node = await self.reserve(name)
        try:
            await slot.open.remote(name, self.owner, identity, seed, resumable)
        except BaseException:
            with contextlib.suppress(RayActorError):
                await slot.release.remote(name, self.owner)
            raise
        return RemoteWorker(self, slot, node, name, identity, seed, resumable)

    async def claim(self, name: str, resume_token: str) -> Claimed | None:
        """Take over session ``name`` from the front end that holds it (alive or not): the slot holding
        it is found by asking each, then checks the token and hands the session over between two chunks,
        with its state there; None if no slot holds it or the token is wrong."""
        self._renew_leases()
        asked = await asyncio.gather(
            *(slot.holds.remote(name) for slot, _ in self.slots), return_exceptions=True
        )
        for (slot, node), holds in zip(self.slots, asked, strict=True):
            if holds is not True:
                continue
            got: SlotClaim | None = await slot.claim.remote(name, resume_token, self.owner, self.lease_s)
            if got is None:
                return None
            resumable = Resumable.of(got.note, resume_token)
            worker = RemoteWorker(
                self, slot, node, name, got.identity, got.seed, resumable, (got.index, got.state), got.notes
            )
            return Claimed(worker=worker, note=got.note, next_chunk=got.index, notes=got.notes)
        return None

    async def reserve(self, name: str, exclude: ActorHandle | None = None) -> tuple[ActorHandle, str]:
        """A slot (and its node) with a place held for session ``name``; ``NoFreeSlot`` if none has one."""
        self._renew_leases()
        for slot, node in self.slots:
            if slot is exclude:
                continue
            try:
                if await slot.reserve.remote(name, self.owner, self.lease_s):
                    return slot, node
            except RayActorError:
                continue  # a dead slot takes no sessions (a restarting one will again)
        raise NoFreeSlot(f"every generator slot is taken ({len(self.slots)} in the cluster); try again later")

    async def held(self) -> int:
        """Places held now over the live slots, by every front end (a session's is given back as its
        worker closes, or when its front end's lease runs out)."""
        held = 0
        for slot, _ in self.slots:
            with contextlib.suppress(RayActorError):
                held += await slot.held.remote()
        return held

    async def close(self) -> None:
        """Stop renewing this front end's lease, and leave Ray if this pool joined it (with ``local``, the
        Ray it started ends, and the slot actors with it)."""
        if self._renewing is not None:
            self._renewing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewing
        if self._owns_ray:
            await asyncio.to_thread(ray.shutdown)

    def _renew_leases(self) -> None:
        """Renew this front end's lease on every slot from now on (from its first call, on the loop)."""
        if self._renewing is None:
            self._renewing = asyncio.get_running_loop().create_task(self._renew_loop())

    async def _renew_loop(self) -> None:
        # Four times a lease: a renewal or two may be late or lost without the places lapsing. Each slot's
        # on its own: a slot that is down (restarting) holds its renewal up, not the other slots'.
        renewing: dict[int, asyncio.Task[None]] = {}
        try:
            while True:
                for i, (slot, _) in enumerate(self.slots):
                    if i not in renewing or renewing[i].done():
                        renewing[i] = asyncio.create_task(self._renew(slot))
                await asyncio.sleep(self.lease_s / 4)
        finally:
            for task in renewing.values():
                task.cancel()

    async def _renew(self, slot: ActorHandle) -> None:
        with contextlib.suppress(RayActorError):
            await slot.renew.remote(self.owner, self.lease_s)
