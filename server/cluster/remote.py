"""The front end's side of generator workers on Ray: a pool of slot actors and a remote worker per session.

    pool = await asyncio.to_thread(RaySlots.connect, ClusterSettings(address="local"), "tiny", {})
    worker = await pool.open(identity=2, seed=7, name="ab12")     # NoFreeSlot when every slot is taken
    jpegs = await worker.produce(cond, cancel, finish)             # cancel.set() reaches the actor
    await worker.close(); await pool.close()

``connect`` joins (or starts) Ray, makes sure every ``onstage_slot`` of the cluster has its named actor
(``slot-0``, ``slot-1``, ... in the ``onstage`` namespace: several front ends share them) and waits until
they have loaded the backend. A session's slot is reserved in the actor itself, so two front ends can never
both take the last one.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
import ray
from ray.actor import ActorHandle
from ray.exceptions import RayActorError

from server.cluster.settings import SLOT_RESOURCE, ClusterSettings
from server.cluster.slot import GeneratorSlot
from streaming_model.backend import BackendManifest
from streaming_model.condition import ChunkCondition
from streaming_model.pool import NoFreeSlot
from streaming_model.worker import Cancel

T = TypeVar("T")

NAMESPACE = "onstage"


class ClusterError(RuntimeError):
    """The cluster cannot serve generators (no slots declared, or they did not come up); says why."""


class RemoteWorker:
    """A ``GeneratorWorker`` whose session lives in a slot actor: the conductor's calls become actor calls,
    a set ``Cancel`` becomes the actor's ``cancel`` (its own concurrency group, so it lands mid-chunk)."""

    def __init__(self, slot: ActorHandle, key: str, manifest: BackendManifest, seed: int, node: str) -> None:
        self.slot = slot
        self.key = key
        self.manifest = manifest
        self.seed = seed
        self.node = node
        """The Ray node the session's generator runs on."""
        self.finish_times: deque[float] = deque(maxlen=200)
        """Seconds each chunk took in the actor from denoised to finished (commit, decode, ``finish``)."""
        self._calls = itertools.count()
        self._closed = False

    async def produce(
        self, cond: ChunkCondition, cancel: Cancel, finish: Callable[[np.ndarray], T]
    ) -> T | None:
        """The next chunk, generated, committed and finished in the actor; None if cancelled first."""
        return await self._chunk(self.slot.produce, cond, cancel, finish)

    async def replace(
        self, cond: ChunkCondition, cancel: Cancel, finish: Callable[[np.ndarray], T]
    ) -> T | None:
        """The last committed chunk again under ``cond``, in the actor; None (nothing changed) if cancelled."""
        return await self._chunk(self.slot.replace, cond, cancel, finish)

    async def capture(self) -> bytes:
        """The committed state, as the backend's portable bytes."""
        result: bytes = await self.slot.capture.remote(self.key)
        return result

    async def restore_state(self, state: object) -> None:
        """Continue from a stored state (bytes, or an older checkpoint's snapshot object)."""
        await self.slot.restore.remote(self.key, state)

    async def close(self) -> None:
        """Close the session in the actor, freeing the slot. Idempotent; a dead actor has nothing to free."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(RayActorError):
            await self.slot.close.remote(self.key)

    async def _chunk(
        self, method: Any, cond: ChunkCondition, cancel: Cancel, finish: Callable[[np.ndarray], T]
    ) -> T | None:
        call = next(self._calls)
        ref = method.remote(self.key, call, cond, finish)
        # Called on the thread that sets the flag; submitting an actor call does not wait for it.
        cancel.when_set(lambda: self.slot.cancel.remote(self.key, call))
        out, finish_s = await ref
        if finish_s is not None:
            self.finish_times.append(finish_s)
        result: T | None = out
        return result


class RaySlots:
    """A ``WorkerPool`` of the cluster's generator slots."""

    def __init__(
        self, slots: list[tuple[ActorHandle, str]], manifest: BackendManifest, owns_ray: bool
    ) -> None:
        """``slots``: the actors and their nodes, interleaved by node so sessions spread over nodes."""
        self.slots = slots
        self._manifest = manifest
        self._owns_ray = owns_ray

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
                resources={SLOT_RESOURCE: 1},
                num_cpus=0,  # the slot resource is what places it
            ).remote(backend, options, settings.sessions_per_slot, settings.threads)
            for i in range(total)
        ]
        try:
            places = ray.get([a.where.remote() for a in actors], timeout=settings.start_timeout_s)
            manifests = ray.get([a.manifest.remote() for a in actors], timeout=settings.start_timeout_s)
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
        return cls(interleaved, manifests[0], owns)

    async def open(self, *, identity: int, seed: int, name: str) -> RemoteWorker:
        """Reserve a free slot for session ``name`` and open its session there (prefilled in the actor)."""
        for slot, node in self.slots:
            try:
                if not await slot.reserve.remote(name):
                    continue
            except RayActorError:
                continue  # a dead slot takes no sessions
            try:
                await slot.open.remote(name, identity, seed)
            except BaseException:
                with contextlib.suppress(RayActorError):
                    await slot.release.remote(name)
                raise
            return RemoteWorker(slot, name, self._manifest, seed, node)
        raise NoFreeSlot(f"every generator slot is taken ({len(self.slots)} in the cluster); try again later")

    async def close(self) -> None:
        """Leave Ray if this pool joined it (the slot actors it made end with it)."""
        if self._owns_ray:
            await asyncio.to_thread(ray.shutdown)
