"""A session snapshot as plain arrays plus msgspec metadata: it round-trips exactly, arrays that do not
make a cache are refused with SnapshotError, and a snapshot of another model is refused by restore
before anything changes."""

from __future__ import annotations

import msgspec
import numpy as np
import pytest
import torch

from streaming_model.condition import ChunkCondition
from streaming_model.kv_cache import SnapshotError
from streaming_model.runtime import Generator, SessionSnapshot, SnapshotMeta


def _played(generator: Generator, chunks: int) -> SessionSnapshot:
    session = generator.open_session(identity=2, seed=4)
    for k in range(chunks):
        session.step(ChunkCondition(action="wave" if k % 2 else "nod", speaking=True, audio=(0.5,) * 4))
    return session.snapshot()


def test_the_export_round_trips_every_tensor_and_scalar(tiny_generator: Generator) -> None:
    snapshot = _played(tiny_generator, 5)
    meta, arrays = snapshot.export()
    # The metadata is plain msgspec data: it survives JSON, as a store may keep it.
    meta = msgspec.json.decode(msgspec.json.encode(meta), type=SnapshotMeta)
    back = SessionSnapshot.from_export(meta, arrays)
    assert (back.index, back.last_action, back.last_phase0, back.seed, back.voice_tail) == (
        snapshot.index,
        snapshot.last_action,
        snapshot.last_phase0,
        snapshot.seed,
        snapshot.voice_tail,
    )
    assert torch.equal(back.base, snapshot.base)
    for name in ("k_q", "k_s", "v_q", "v_s", "slot_pos"):
        np.testing.assert_array_equal(getattr(back.cache, name), getattr(snapshot.cache, name), err_msg=name)
    assert (back.cache.count, back.cache.pos_next) == (snapshot.cache.count, snapshot.cache.pos_next)
    arrays["cache.k_q"][:] = 0  # the import copied: the caller's arrays are its own
    assert torch.equal(back.cache.k_q, snapshot.cache.k_q)


def test_arrays_that_do_not_make_a_snapshot_are_refused(tiny_generator: Generator) -> None:
    meta, arrays = _played(tiny_generator, 2).export()
    broken = {
        "no cache keys": {k: v for k, v in arrays.items() if k != "cache.k_q"},
        "keys of the wrong dtype": {**arrays, "cache.k_q": arrays["cache.k_q"].astype(np.float32)},
        "scales that do not fit the keys": {**arrays, "cache.k_s": arrays["cache.k_s"][:, :, :-1]},
        "half of the naive pair": {**arrays, "cache.raw_k": arrays["cache.k_q"].astype(np.float32)},
        "an extra array": {**arrays, "cache.extra": arrays["cache.k_s"]},
        "no base": {k: v for k, v in arrays.items() if k != "base"},
    }
    for what, bad in broken.items():
        with pytest.raises(SnapshotError):
            SessionSnapshot.from_export(meta, bad)
            pytest.fail(what)
    with pytest.raises(SnapshotError, match="out of range"):
        SessionSnapshot.from_export(msgspec.structs.replace(meta, index=-1), arrays)


def test_restore_refuses_a_snapshot_of_another_model_and_changes_nothing(tiny_generator: Generator) -> None:
    shipped = Generator.load().open_session(identity=2, seed=4)
    shipped.step(ChunkCondition())
    before = shipped.snapshot()
    with pytest.raises(SnapshotError, match="shape"):
        shipped.restore(_played(tiny_generator, 1))
    after = shipped.snapshot()
    assert after.index == before.index == 1 and torch.equal(after.cache.k_q, before.cache.k_q)
