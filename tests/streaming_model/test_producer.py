"""Frames first, cache after: a produced chunk's frames come out before the session commits it, the chunk
is committed when the next is made, and replacing it is a plain regeneration; the frames are a direct
session's whatever the order."""

from __future__ import annotations

import threading
from collections import deque

import numpy as np

from streaming_model.backend import Backend, BackendSession
from streaming_model.condition import ChunkCondition
from streaming_model.producer import Producer
from streaming_model.world_backend import WorldBackend
from tests.support.backends import Recording

WAVE, NOD, JUMP, SIT = (ChunkCondition(action=a) for a in ("wave", "nod", "jump", "sit"))


def copy(frames: np.ndarray) -> np.ndarray:
    return frames.copy()


def direct(backend: Backend, conds: list[ChunkCondition]) -> list[np.ndarray]:
    """Each chunk's frames from a session that commits every chunk at once."""
    session = backend.open_session(identity=0)
    out = []
    for c in conds:
        pending = session.generate(c)
        assert pending is not None
        session.commit(pending)
        out.append(session.decode(pending))
    return out


def producer() -> tuple[Recording, Producer]:
    backend = Recording(WorldBackend(warmup_chunks=1))
    return backend, Producer(backend.open_session(identity=0), backend.manifest)


def made(producer: Producer, cond: ChunkCondition, cancel: threading.Event | None = None) -> np.ndarray:
    out = producer.produce(cond, cancel or threading.Event(), copy, deque())
    assert out is not None
    return out


def calls_since(backend: Recording, n: int) -> list[str]:
    return [name for name, _ in backend.calls[n:]]


def test_a_chunks_frames_come_out_before_its_commit_which_waits_for_the_next_chunk() -> None:
    backend, p = producer()
    n = len(backend.calls)
    first = made(p, WAVE)
    assert calls_since(backend, n) == ["generate", "decode"]
    assert (p.index, p.session.index) == (1, 0)  # produced, held, not yet committed
    n = len(backend.calls)
    second = made(p, NOD)
    assert calls_since(backend, n) == ["commit", "generate", "decode"]
    assert p.take_commit_s() > 0 and p.take_commit_s() == 0
    expected = direct(backend.backend, [WAVE, NOD])
    assert np.array_equal(first, expected[0]) and np.array_equal(second, expected[1])


def test_replacing_the_held_chunk_regenerates_it_with_no_snapshot_or_rollback() -> None:
    backend, p = producer()
    made(p, WAVE)
    n = len(backend.calls)
    replaced = p.replace(JUMP, threading.Event(), copy, deque())
    assert calls_since(backend, n) == ["generate", "decode"]
    after = made(p, SIT)
    expected = direct(backend.backend, [JUMP, SIT])
    assert replaced is not None and np.array_equal(replaced, expected[0])
    assert np.array_equal(after, expected[1])


def test_a_cancelled_replacement_leaves_the_held_chunk_which_the_next_chunk_continues() -> None:
    backend, p = producer()
    first = made(p, WAVE)
    cancelled = threading.Event()
    cancelled.set()
    assert p.replace(JUMP, cancelled, copy, deque()) is None
    assert p.produce(JUMP, cancelled, copy, deque()) is None  # commits the held chunk, makes nothing
    assert p.index == 1
    after = made(p, SIT)
    expected = direct(backend.backend, [WAVE, SIT])
    assert np.array_equal(first, expected[0]) and np.array_equal(after, expected[1])


def test_a_captured_state_holds_every_chunk_produced_and_a_replacement_after_it_rolls_back() -> None:
    backend, p = producer()
    made(p, WAVE)
    state = p.capture()  # commits the held chunk: the state has it
    assert p.session.index == 1 and p.held is None
    replaced = p.replace(NOD, threading.Event(), copy, deque())  # no longer held: rolled back instead
    assert "rollback" in calls_since(backend, 0)
    assert replaced is not None and np.array_equal(replaced, direct(backend.backend, [NOD])[0])
    expected = direct(backend.backend, [WAVE, NOD, SIT])
    other: BackendSession = backend.backend.open_session(identity=0)
    again = Producer(other, backend.manifest)
    again.restore_state(state)
    assert again.index == 1
    made(again, NOD)
    assert np.array_equal(made(again, SIT), expected[2])


def test_a_splice_makes_the_playing_chunk_again_and_forgets_the_one_made_after_it() -> None:
    backend, p = producer()
    made(p, WAVE)
    made(p, NOD)
    made(p, NOD)  # chunk 2, held; chunk 1 (playing) is committed
    spliced = p.splice(1, JUMP, threading.Event(), copy, deque())
    assert (p.index, p.session.index) == (2, 1)  # the new chunk 1 is held, chunk 2 is gone
    after = made(p, SIT)
    expected = direct(backend.backend, [WAVE, JUMP, SIT])
    assert spliced is not None and np.array_equal(spliced, expected[1])
    assert np.array_equal(after, expected[2])


def test_a_splice_reaches_back_past_a_chunk_already_committed_or_one_cancelled() -> None:
    backend, p = producer()
    made(p, WAVE)
    made(p, NOD)
    p.settle()  # chunk 1 committed too (a capture): the splice of chunk 0 rolls two back
    again = p.splice(0, JUMP, threading.Event(), copy, deque())
    assert again is not None and np.array_equal(again, direct(backend.backend, [JUMP])[0])
    cancelled = threading.Event()
    cancelled.set()
    assert p.produce(NOD, cancelled, copy, deque()) is None  # chunk 0 committed, nothing held
    spliced = p.splice(0, SIT, threading.Event(), copy, deque())
    assert spliced is not None and np.array_equal(spliced, direct(backend.backend, [SIT])[0])


def test_a_cancelled_splice_leaves_every_chunk_as_it_was() -> None:
    backend, p = producer()
    made(p, WAVE)
    made(p, NOD)
    cancelled = threading.Event()
    cancelled.set()
    assert p.splice(0, JUMP, cancelled, copy, deque()) is None
    assert p.index == 2 and p.held is not None
    after = made(p, SIT)
    assert np.array_equal(after, direct(backend.backend, [WAVE, NOD, SIT])[2])


def test_a_splice_of_the_held_chunk_itself_is_a_plain_regeneration() -> None:
    backend, p = producer()
    made(p, WAVE)
    n = len(backend.calls)
    spliced = p.splice(0, JUMP, threading.Event(), copy, deque())
    assert calls_since(backend, n) == ["generate", "decode"]
    assert spliced is not None and np.array_equal(spliced, direct(backend.backend, [JUMP])[0])


def test_a_splice_foreseen_leaves_every_chunk_as_it_was() -> None:
    backend, p = producer()
    made(p, WAVE)
    made(p, NOD)
    made(p, NOD)  # chunk 2 held, chunk 1 playing
    foreseen = p.foresee(1, JUMP, threading.Event(), copy, deque())
    assert foreseen is not None and np.array_equal(foreseen[0], direct(backend.backend, [WAVE, JUMP])[1])
    assert (p.index, p.session.index) == (3, 2) and p.held is not None
    assert np.array_equal(made(p, SIT), direct(backend.backend, [WAVE, NOD, NOD, SIT])[3])


def test_a_splice_foreseen_and_adopted_is_the_splice_even_after_the_next_chunk_was_made() -> None:
    # Prepared while chunk 2 waits; the input is confirmed after chunk 3 was made: adopting it is splicing.
    backend, p = producer()
    made(p, WAVE)
    made(p, NOD)
    made(p, NOD)
    foreseen = p.foresee(2, JUMP, threading.Event(), copy, deque())  # the held chunk itself
    assert foreseen is not None
    made(p, NOD)
    assert p.adopt(foreseen[1])
    assert (p.index, p.session.index) == (3, 2)  # as a splice of chunk 2 leaves it
    expected = direct(backend.backend, [WAVE, NOD, JUMP, SIT])
    assert np.array_equal(foreseen[0], expected[2]) and np.array_equal(made(p, SIT), expected[3])


def test_a_splice_foreseen_is_not_adopted_once_a_chunk_before_it_was_made_again() -> None:
    backend, p = producer()
    made(p, WAVE)
    made(p, NOD)
    made(p, NOD)
    foreseen = p.foresee(2, JUMP, threading.Event(), copy, deque())
    assert foreseen is not None
    spliced = p.splice(1, SIT, threading.Event(), copy, deque())  # another input, spliced into chunk 1
    assert spliced is not None and np.array_equal(spliced, direct(backend.backend, [WAVE, SIT])[1])
    assert not p.adopt(foreseen[1])
    assert np.array_equal(made(p, NOD), direct(backend.backend, [WAVE, SIT, NOD])[2])


def test_a_splice_after_one_foreseen_for_another_condition_starts_from_the_same_state() -> None:
    # Foreseeing rolls back and restores, which leaves nothing to roll back: the splice starts from the
    # state the foresight kept.
    backend, p = producer()
    made(p, WAVE)
    made(p, NOD)
    made(p, NOD)
    assert p.foresee(1, JUMP, threading.Event(), copy, deque()) is not None
    spliced = p.splice(1, SIT, threading.Event(), copy, deque())
    expected = direct(backend.backend, [WAVE, SIT, NOD])
    assert spliced is not None and np.array_equal(spliced, expected[1])
    assert np.array_equal(made(p, NOD), expected[2])
