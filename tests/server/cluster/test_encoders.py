"""The encoders shared on the cluster (one actor per node): they hear and speak as a front end's own
models, a front end spreads its calls over those of every node, and a session served with them hears its
client and speaks."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

pytest.importorskip("ray")

import ray

from events.hearing import Hearing
from events.transcriber import words
from server.app import OnstageServer
from server.client import SessionClient
from server.cluster.encoders import name_of
from server.cluster.remote import NAMESPACE, RaySlots
from server.cluster.remote_encoders import RemoteTranscriber, RemoteYamNet
from server.limits import Limits
from server.sessions import SessionFactory
from server.voice import Voice
from tests.server.cluster.front_ends import until_no_sessions
from tests.support.microphone import speak_into
from tests.support.serving import serving, until
from tests.support.sound_set import SPEECH, clip

pytestmark = pytest.mark.asyncio(loop_scope="package")


async def test_the_shared_encoders_hear_and_speak_as_a_front_end_s_own_models(
    factory: SessionFactory, shared: tuple[Voice, Hearing]
) -> None:
    voice, hearing = shared
    text = "Hi! Nice to meet you."
    own = await asyncio.to_thread(factory.voice.synthesize, text)
    for first in (True, False):  # at the video's priority there, and below it
        theirs = await voice.synthesize_async(text, first=first)
        assert np.array_equal(theirs.samples, own.samples) and theirs.words == own.words
    talk = clip(SPEECH[0])
    assert hearing.transcriber is not None and factory.hearing.transcriber is not None
    heard = await asyncio.wrap_future(hearing.transcriber.submit(talk))
    assert (
        words(heard.text)
        and heard.text == (await asyncio.wrap_future(factory.hearing.transcriber.submit(talk))).text
    )
    knock = clip("knock_a")
    assert hearing.yamnet is not None and factory.hearing.yamnet is not None
    scores = await asyncio.to_thread(hearing.yamnet.scores, knock)
    assert np.array_equal(scores, await asyncio.to_thread(factory.hearing.yamnet.scores, knock))
    # The actors serve every front end, found by their names.
    named = ray.get_actor(name_of(1), namespace=NAMESPACE)
    assert await named.labels.remote() == factory.hearing.yamnet.labels


async def test_a_front_end_spreads_its_encoder_calls_over_the_encoders_of_every_node(
    shared: tuple[Voice, Hearing],
) -> None:
    voice, hearing = shared
    assert isinstance(hearing.transcriber, RemoteTranscriber) and isinstance(hearing.yamnet, RemoteYamNet)
    actors = [ray.get_actor(name_of(i), namespace=NAMESPACE) for i in range(2)]
    assert len({await actor.where.remote() for actor in actors}) == 2  # one per node, by its resource
    before = [await actor.served.remote() for actor in actors]
    talk, knock = clip(SPEECH[0]), clip("knock_a")
    # At once, as several sessions would ask: each kind of call reaches both actors.
    await asyncio.gather(
        *(asyncio.wrap_future(hearing.transcriber.submit(talk)) for _ in range(2)),
        *(asyncio.to_thread(hearing.yamnet.scores, knock) for _ in range(2)),
        *(voice.synthesize_async(f"Line {n}.") for n in range(4)),
    )
    after = [await actor.served.remote() for actor in actors]
    for kind in ("transcribe", "sounds", "voice"):
        assert all(a.get(kind, 0) > b.get(kind, 0) for a, b in zip(after, before, strict=True)), (kind, after)


async def test_a_session_with_the_shared_encoders_hears_its_client_and_speaks(
    ray_server: OnstageServer, slots: RaySlots, shared: tuple[Voice, Hearing]
) -> None:
    await until_no_sessions(ray_server)
    voice, hearing = shared
    remote = SessionFactory(None, voice, hearing, workers=slots)
    async with serving(remote, Limits(admission="ceiling", max_sessions=2, resume_grace_s=0.2)) as (_, url):
        async with SessionClient(url) as client:
            await client.start(seed=9)  # the greeter: it says hello
            await client.wait_type("character.speech", state="started", timeout=60)
            # Its voice reaches the client; heard before the user speaks, whose speech would cut it (on a
            # loaded machine the barge-in came before the greeting's first voiced chunk was sent).
            await until(lambda: any(np.frombuffer(a.pcm, "<i2").any() for a in client.received.audio), 60)
            await speak_into(client, np.concatenate([clip(SPEECH[0]), np.zeros(24_000, np.float32)]))
            transcript = await client.wait_type("input.transcript", timeout=60)
            assert words(transcript["text"])
    await until_no_sessions(ray_server)
