"""Snapshot blobs: the realizer's and the generator's snapshots round-trip through the checkpoint format
exactly (the same frames afterwards, byte for byte), and a blob that is corrupt, of a newer version, of
another kind or an old pickle is refused with a message that says which."""

from __future__ import annotations

import hashlib
import pickle
import sqlite3
from pathlib import Path

import msgspec
import numpy as np
import pytest
import torch

from agent.plans import Action, Block, Speech, SyncRef
from agent.realizer import ChunkOutput, Realizer
from agent.story import blobs
from agent.story.blobs import BlobError, decode_generator, decode_realizer, encode_generator, encode_realizer
from agent.story.format import StoryError, load_story
from agent.story.player import StoryPlayer
from agent.story.store import CheckpointStore
from events.bus import EventBus
from streaming_model.condition import ChunkCondition
from streaming_model.kv_cache import CacheMode
from streaming_model.runtime import Generator, Session


@pytest.fixture(scope="module")
def generator() -> Generator:
    torch.set_num_threads(1)
    return Generator.load()


def frames(session: Session, conditions: list[ChunkCondition]) -> list[bytes]:
    return [np.ascontiguousarray(session.step(c)).tobytes() for c in conditions]


def advance(session: Session, conditions: list[ChunkCondition]) -> None:
    """Generate and commit without decoding (the frames before a snapshot are not compared)."""
    for c in conditions:
        pending = session.generate(c)
        assert pending is not None
        session.commit(pending, decode=False)


def play(realizer: Realizer, session: Session, count: int) -> tuple[list[ChunkOutput], list[bytes]]:
    """Tick the realizer and generate each chunk from its condition, as the session conductor does."""
    outs = [realizer.tick(realizer.chunk + 1) for _ in range(count)]
    return outs, frames(session, [o.condition for o in outs])


SPEAKING = [
    ChunkCondition(action="wave", speaking=True, audio=(0.2, 0.8, 0.6, 0.1)),
    ChunkCondition(action="nod", emotion="happy", speaking=True, audio=(0.9, 0.4, 0.0, 0.5)),
    ChunkCondition(action="look_at", target=(0.5, -0.2)),
]


@pytest.mark.parametrize("mode", ["write_time", "naive"])
def test_a_generator_snapshot_through_a_blob_continues_with_the_same_frames(
    generator: Generator, mode: CacheMode
) -> None:
    session = generator.open_session(identity=3, seed=9, cache_mode=mode)
    advance(session, [*SPEAKING, SPEAKING[0]])  # past the window of 3: the ring has wrapped
    blob = encode_generator(session.snapshot())
    expected = frames(session, SPEAKING[1:])

    fresh = generator.open_session(identity=3, seed=0, cache_mode=mode)  # another seed: the blob's wins
    fresh.restore(decode_generator(blob))
    assert fresh.index == 4 and fresh.seed == 9
    assert frames(fresh, SPEAKING[1:]) == expected
    assert encode_generator(fresh.snapshot()) != blob  # it moved on from there, and the blob shows it


def test_realizer_and_generator_through_blobs_give_the_same_chunks_and_frames(generator: Generator) -> None:
    """A server-voice realizer mid-speech: after the round trip its voice and its block are still one, so
    the voice's report that the speech ended early moves the nod synchronised to that end on both sides."""

    def setup() -> tuple[Realizer, Session]:
        return Realizer(EventBus(), session="s", voice="server"), generator.open_session(identity=1, seed=3)

    realizer, session = setup()
    realizer.submit(
        Block(
            id="b",
            source="script",
            behaviors=[
                Speech(id="s", text="one two three four five six seven eight nine ten"),
                Action(name="nod", start=SyncRef(to="s", point="end")),
            ],
        )
    )
    realizer.submit(Block(id="later", source="director", behaviors=[Action(name="wave", duration_s=1.0)]))
    first = realizer.tick(0)
    cue = first.speech_start[0]
    realizer.speech_started(cue.speech_id, duration_s=3.0)
    realizer.speech_audio(cue.speech_id, [0.7, 0.2, 0.9] * 24)
    advance(session, [first.condition, *(realizer.tick(k).condition for k in (1, 2, 3))])
    realizer_blob, generator_blob = encode_realizer(realizer.snapshot()), encode_generator(session.snapshot())

    def go_on(realizer: Realizer, session: Session) -> tuple[list[ChunkOutput], list[bytes]]:
        outs, pictures = play(realizer, session, 2)
        realizer.speech_ended(cue.speech_id)  # earlier than its 3 s: the nod moves up
        more, more_pictures = play(realizer, session, 3)
        return outs + more + [realizer.tick(k) for k in range(9, 18)], pictures + more_pictures

    expected = go_on(realizer, session)
    assert "nod" in [o.condition.action for o in expected[0]]

    fresh, fresh_session = setup()
    fresh.restore(decode_realizer(realizer_blob))
    fresh_session.restore(decode_generator(generator_blob))
    assert go_on(fresh, fresh_session) == expected
    assert fresh.blocks() == realizer.blocks()


def _reblob(blob: bytes, change: dict[str, object]) -> bytes:
    """``blob`` with fields of its document changed, and a valid checksum (a well-formed foreign blob)."""
    doc = msgspec.msgpack.decode(blob[len(blobs.MAGIC) + 32 :])
    body = msgspec.msgpack.encode({**doc, **change})
    return blobs.MAGIC + hashlib.sha256(body).digest() + body


def test_corrupt_newer_foreign_and_pickled_blobs_are_refused_with_what_is_wrong(
    generator: Generator,
) -> None:
    session = generator.open_session(identity=0, seed=1)
    session.step(ChunkCondition())
    snapshot = session.snapshot()
    blob = encode_generator(snapshot)
    realizer_blob = encode_realizer(Realizer().snapshot())
    flipped = bytearray(blob)
    flipped[len(flipped) // 2] ^= 0x40  # one bit in the middle of the cache's keys
    cases = {
        bytes(flipped): "corrupt (its checksum does not match)",
        blob[: len(blob) // 2]: "corrupt (its checksum does not match)",
        _reblob(blob, {"version": blobs.VERSION + 1}): f"from a newer onstage (format {blobs.VERSION + 1};",
        realizer_blob: "a 'realizer' snapshot where a generator one belongs",
        b"PK\x03\x04 a zip file": "not an onstage snapshot",
        pickle.dumps(snapshot): "an old pickle, refused (a pickle can run code): take this checkpoint again",
        _reblob(blob, {"meta": {"index": "seven"}}): "malformed (not a generator snapshot of format",
        _reblob(blob, {"arrays": {"base": ["float32", [1, 2], b"\x00" * 4]}}): "inconsistent (an array's",
    }
    for bad, reason in cases.items():
        with pytest.raises(BlobError) as caught:
            decode_generator(bad)
        assert str(caught.value).startswith(reason)
    with pytest.raises(BlobError, match=r"^inconsistent \(its arrays do not make a generator state\)$"):
        arrays = msgspec.msgpack.decode(blob[len(blobs.MAGIC) + 32 :])["arrays"]
        decode_generator(_reblob(blob, {"arrays": {"base": arrays["base"]}}))  # no cache
    with pytest.raises(BlobError, match=r"^a 'generator' snapshot where a realizer one belongs$"):
        decode_realizer(blob)


async def test_the_store_refuses_unreadable_checkpoints_by_name_and_keeps_the_others(
    generator: Generator, tmp_path: Path
) -> None:
    """Rows of each kind of damage, written over a real story's checkpoints: reading one is a StoryError
    naming the checkpoint and the part (the server sends it as the error's message); the rest still load."""
    db = tmp_path / "stories.db"
    store = CheckpointStore(db)
    session = generator.open_session(identity=0, seed=1)
    player = await StoryPlayer.begin(
        load_story("garden_gate"), Realizer(session="s1"), session="s1", store=store, capture=session.snapshot
    )
    for choice in ("wave", "ask", "take_key"):
        session.step(ChunkCondition())
        await player.choose(choice)
    with sqlite3.connect(db) as con:
        con.execute(
            "UPDATE story_checkpoints SET generator = ? WHERE id = 'c2'",
            (_reblob(encode_generator(session.snapshot()), {"version": 7}),),
        )
        con.execute(
            "UPDATE story_checkpoints SET realizer = ? WHERE id = 'c3'",
            (pickle.dumps(player.realizer.snapshot()),),  # what the old code wrote
        )
        con.execute("UPDATE story_checkpoints SET state = ? WHERE id = 'c4'", (b"{not json",))
    expected = {
        "c2": "checkpoint: checkpoint 'c2': its generator state is from a newer onstage (format 7; "
        f"this one reads up to {blobs.VERSION})",
        "c3": "checkpoint: checkpoint 'c3': its realizer state is an old pickle, refused (a pickle can "
        "run code): take this checkpoint again",
        "c4": "checkpoint: checkpoint 'c4': its story state is corrupt",
    }
    for checkpoint, message in expected.items():
        with pytest.raises(StoryError) as caught:
            await player.rewind(checkpoint)
        assert str(caught.value) == message
    restored = await player.rewind("c1")
    assert restored.view.node == "gate" and restored.generator is not None
    await store.close()
