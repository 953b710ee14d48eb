"""Generator workers on Ray: a real two-node Ray cluster on this machine (``ray.cluster_utils.Cluster``,
one ``onstage_slot`` per node), real slot actors with the shipped model, real servers on loopback (two
front ends in this process, and one ``onstage serve`` of its own to be killed) and real clients. Ray
starts once for the whole package and is shut down at its end: the cluster and everything tied to it
(the front ends, their servers, the shared encoders, the in-process server and its reference frames) are
package-scoped, on the package's event loop."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import pytest_asyncio

from events.hearing import Hearing
from events.transcriber import TranscriberConfig
from server.app import OnstageServer
from server.client import SessionClient
from server.cluster.settings import ENCODERS_RESOURCE, SLOT_RESOURCE
from server.limits import Limits
from server.sessions import SessionFactory
from server.voice import Voice
from tests.support.serving import SHARED_SERVER_LIMITS, serving
from tests.support.voicing import STILL

# Without the ``ray`` extra every module here skips (``pytest.importorskip``) and no fixture below runs.
with contextlib.suppress(ImportError):
    import ray
    from ray.cluster_utils import Cluster

    from server.cluster.remote import RaySlots
    from server.cluster.remote_encoders import shared_voice_and_hearing
    from tests.server.cluster.front_ends import front_end

NODE: dict[str, Any] = {
    "num_cpus": 1,
    "resources": {SLOT_RESOURCE: 1, ENCODERS_RESOURCE: 1},
    "object_store_memory": 80 * 1024 * 1024,
}
REFERENCE_CHUNKS = 48


@pytest.fixture(scope="package")
def cluster() -> Iterator[Cluster]:
    """Two Ray nodes on this machine, one generator slot and one encoders actor each."""
    nodes = Cluster(initialize_head=True, head_node_args={**NODE, "include_dashboard": False})
    try:
        nodes.add_node(**NODE)
        ray.init(address=nodes.address, namespace="onstage")
        nodes.wait_for_nodes()
        yield nodes
    finally:
        ray.shutdown()
        nodes.shutdown()


@contextlib.asynccontextmanager
async def ray_serving(factory: SessionFactory, slots: RaySlots) -> AsyncIterator[OnstageServer]:
    """A server on loopback whose sessions' generators are ``slots``' (closed with it)."""
    remote = SessionFactory(None, factory.voice, factory.hearing, workers=slots)
    try:
        async with serving(remote, Limits(admission="ceiling", max_sessions=6, resume_grace_s=0.2)) as (
            srv,
            _,
        ):
            yield srv
    finally:
        await slots.close()


@pytest_asyncio.fixture(loop_scope="package", scope="package")
async def server(factory: SessionFactory) -> AsyncIterator[OnstageServer]:
    """``tests/server/conftest.py``'s in-process server (its sessions make their own frames: the reference
    for the remote ones), held for the whole package and on the package's event loop, as the tests here
    run on it."""
    async with serving(factory, SHARED_SERVER_LIMITS) as (srv, _):
        yield srv


@pytest_asyncio.fixture(loop_scope="package", scope="package")
async def slots(cluster: Cluster) -> RaySlots:
    return await front_end(cluster)


@pytest_asyncio.fixture(loop_scope="package", scope="package")
async def ray_server(factory: SessionFactory, slots: RaySlots) -> AsyncIterator[OnstageServer]:
    async with ray_serving(factory, slots) as srv:
        yield srv


@pytest_asyncio.fixture(loop_scope="package", scope="package")
async def second_front_end(factory: SessionFactory, cluster: Cluster) -> AsyncIterator[OnstageServer]:
    async with ray_serving(factory, await front_end(cluster)) as srv:
        yield srv


@pytest_asyncio.fixture(loop_scope="package", scope="package")
async def still_reference(server: OnstageServer) -> dict[tuple[int, int], bytes]:
    """Seed 43 with the still plan, in process, no input: each (generator chunk, frame)'s JPEG."""
    async with SessionClient(f"ws://127.0.0.1:{server.port}/v1/session") as ref:
        await ref.start(seed=43, director="none", plan=STILL)
        await ref.wait_frame(lambda f: f.header["gen_chunk"] >= REFERENCE_CHUNKS, timeout=120)
        return {(f.header["gen_chunk"], f.header["frame"]): f.jpeg for f in ref.received.video}


@pytest_asyncio.fixture(loop_scope="package", scope="package")
async def shared(cluster: Cluster) -> tuple[Voice, Hearing]:
    """A front end's voice and hearing from the cluster's shared encoders actor."""
    return await asyncio.to_thread(shared_voice_and_hearing, TranscriberConfig(), True)
