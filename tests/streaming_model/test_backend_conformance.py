"""The backend conformance suite: every backend in the repository (and the world at an odd clock) does what
its manifest declares. A new backend adds itself to ``BACKENDS`` and passes these.

The tiny model runs here with the small random models of conftest.py (its mechanics do not depend on
training) and few chunks a case: a chunk costs it about 0.1 s with the shipped weights.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator

import msgspec
import numpy as np
import pytest

from streaming_model.backend import Backend, BackendSession, apply_fallbacks, check_fallbacks
from streaming_model.backends import open_backend, parse_options
from streaming_model.condition import ChunkCondition, ConditionError, encode, next_phase
from streaming_model.kv_cache import RollbackError, SnapshotError
from streaming_model.runtime import Generator
from streaming_model.tiny import TinyBackend
from streaming_model.world.episodes import simulate
from streaming_model.world_backend import WorldBackend, WorldOptions

BACKENDS = ("tiny", "world", "world-16fps-12f-160x96")
ODD = WorldOptions(fps=16, chunk_frames=12, width=160, height=96)
ACTIONS = ("wave", "walk_right", "nod", "jump", "sit")


@pytest.fixture(scope="module", params=BACKENDS)
def backend(request: pytest.FixtureRequest, tiny_generator: Generator) -> Backend:
    name: str = request.param
    if name == "tiny":
        return TinyBackend(tiny_generator, warmup_chunks=2)
    return WorldBackend(ODD if name != "world" else None, warmup_chunks=2)


def cond(backend: Backend, action: str = "idle", **kw: object) -> ChunkCondition:
    """A condition with the backend's envelope length (a voice, so the mouth moves too)."""
    n = backend.manifest.vocabulary.frames_per_chunk
    audio = tuple(round(0.5 + 0.4 * math.sin(i), 3) for i in range(n))
    return ChunkCondition(action=action, speaking=True, audio=audio, **kw)  # type: ignore[arg-type]


def play(session: BackendSession, conds: list[ChunkCondition]) -> list[np.ndarray]:
    out = []
    for c in conds:
        pending = session.generate(c)
        assert pending is not None
        out.append(session.decode(pending))
        session.commit(pending)
    return out


def chunks(backend: Backend, n: int) -> list[ChunkCondition]:
    return [cond(backend, ACTIONS[i % len(ACTIONS)]) for i in range(n)]


@pytest.fixture
def session(backend: Backend) -> Iterator[BackendSession]:
    s = backend.open_session(identity=2, seed=7)
    yield s
    s.close()


def test_chunks_have_the_declared_frame_count_size_and_type(
    backend: Backend, session: BackendSession
) -> None:
    m = backend.manifest
    v = m.vocabulary
    frames = play(session, chunks(backend, 3))
    assert [f.shape[0] for f in frames] == [m.first_chunk_frames, v.frames_per_chunk, v.frames_per_chunk]
    for f in frames:
        assert f.shape[1:] == (v.height, v.width, 3) and f.dtype == np.uint8
    assert session.index == 3
    # Frames show the conditions: a wave, a walk and a nod are not one picture.
    assert not np.array_equal(frames[0][-1], frames[1][-1])


def test_costs_are_measured(backend: Backend) -> None:
    c = backend.manifest.costs
    assert 0 < c.chunk_p50_ms <= c.chunk_p95_ms
    assert c.finish_p50_ms >= 0 and c.commit_p50_ms >= 0 and c.first_chunk_ms > 0 and c.interrupt_ms >= 0


def test_a_chunks_frames_come_before_its_commit_and_do_not_depend_on_it(
    backend: Backend, session: BackendSession
) -> None:
    """Frames first, cache after: decoding reads only the chunk, so its frames are the same before and after
    the session takes it, and a chunk decoded (or decoded again) and never committed leaves no trace."""
    play(session, [cond(backend, "wave")])
    pending = session.generate(cond(backend, "nod"))
    assert pending is not None
    before = session.decode(pending)
    assert session.index == 1
    discarded = session.generate(cond(backend, "jump"))
    assert discarded is not None
    session.decode(discarded)
    session.commit(pending)
    assert np.array_equal(session.decode(pending), before)
    after = play(session, [cond(backend, "sit")])
    # A session that commits each chunk before decoding it draws the same frames.
    reference = backend.open_session(identity=2, seed=7)
    expected = []
    for c in (cond(backend, "wave"), cond(backend, "nod"), cond(backend, "sit")):
        taken = reference.generate(c)
        assert taken is not None
        reference.commit(taken)
        expected.append(reference.decode(taken))
    assert np.array_equal(before, expected[1]) and np.array_equal(after[0], expected[2])


def test_generate_leaves_committed_state_untouched(backend: Backend, session: BackendSession) -> None:
    first, discarded, kept = cond(backend, "wave"), cond(backend, "jump"), cond(backend, "walk_left")
    play(session, [first])
    assert session.generate(discarded) is not None
    assert session.index == 1
    got = play(session, [kept])
    reference = backend.open_session(identity=2, seed=7)
    expected = play(reference, [first, kept])
    assert np.array_equal(got[0], expected[1])


class FlipsAfter(threading.Event):
    """A cancel flag that turns itself on at its ``n``-th read: a caller interrupting mid-generation,
    without depending on how long a chunk takes."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.reads, self.n = 0, n

    def is_set(self) -> bool:
        self.reads += 1
        if self.reads >= self.n:
            self.set()
        return super().is_set()


def test_cancel_stops_generation_within_the_declared_granularity(
    backend: Backend, session: BackendSession
) -> None:
    granularity = backend.manifest.capabilities.interrupt
    play(session, [cond(backend, "wave")])
    early = threading.Event()
    early.set()
    assert (session.generate(cond(backend, "nod"), early) is None) == (granularity != "none")
    if granularity in ("block", "step"):
        # Set after generation began (its second read): a chunk-granular backend would finish the chunk.
        mid = FlipsAfter(2)
        assert session.generate(cond(backend, "nod"), mid) is None
        assert mid.reads == 2  # it stopped at the first read after the flag went up
    assert session.index == 1
    after = play(session, [cond(backend, "nod")])
    reference = backend.open_session(identity=2, seed=7)
    assert np.array_equal(after[0], play(reference, [cond(backend, "wave"), cond(backend, "nod")])[1])


def test_rollback_reaches_the_declared_depth_and_continues_exactly(
    backend: Backend, session: BackendSession
) -> None:
    caps = backend.manifest.capabilities
    conds = chunks(backend, caps.rollback_depth + 1)
    frames = play(session, conds)
    with pytest.raises(RollbackError):
        session.rollback(caps.rollback_depth + 1)
    session.rollback(2)
    assert session.index == len(conds) - 2
    again = play(session, conds[-2:])
    if caps.deterministic:
        assert all(np.array_equal(a, b) for a, b in zip(again, frames[-2:], strict=True))


def test_snapshot_and_restore_are_as_exact_as_declared(backend: Backend, session: BackendSession) -> None:
    caps = backend.manifest.capabilities
    if caps.snapshots == "none":
        with pytest.raises(SnapshotError):
            session.snapshot()
        return
    play(session, [cond(backend, "wave")])
    snap = session.snapshot()
    later = play(session, [cond(backend, "jump"), cond(backend, "sit")])
    session.restore(snap)
    assert session.index == 1
    again = play(session, [cond(backend, "jump"), cond(backend, "sit")])
    if caps.snapshots == "exact":
        assert all(np.array_equal(a, b) for a, b in zip(again, later, strict=True))


def test_same_seed_same_frames_when_deterministic(backend: Backend) -> None:
    if not backend.manifest.capabilities.deterministic:
        pytest.skip("this backend does not declare determinism")
    conds = chunks(backend, 3)
    a = play(backend.open_session(identity=1, seed=3), conds)
    b = play(backend.open_session(identity=1, seed=3), conds)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def test_exported_state_continues_in_a_fresh_session(backend: Backend, session: BackendSession) -> None:
    caps = backend.manifest.capabilities
    if caps.snapshots == "none":
        pytest.skip("no snapshots to export")
    play(session, chunks(backend, 2))
    blob = session.export_state(session.snapshot())
    assert isinstance(blob, bytes)
    expected = play(session, [cond(backend, "turn", side="left")])
    fresh = backend.open_session(identity=2, seed=7)
    fresh.restore(fresh.import_state(blob))
    assert fresh.index == 2
    got = play(fresh, [cond(backend, "turn", side="left")])
    if caps.snapshots == "exact":
        assert np.array_equal(got[0], expected[0])
    with pytest.raises(SnapshotError):
        fresh.import_state(b"not a state")
    with pytest.raises(SnapshotError):
        fresh.import_state(blob[:-1] + bytes([blob[-1] ^ 1]))  # corrupt
    with pytest.raises(SnapshotError):
        fresh.restore(object())  # not one of this backend's


def test_foreign_states_are_refused(tiny_generator: Generator) -> None:
    tiny = TinyBackend(tiny_generator, warmup_chunks=1).open_session(identity=0)
    world = WorldBackend(warmup_chunks=1).open_session(identity=0)
    with pytest.raises(SnapshotError):
        world.restore(tiny.snapshot())
    with pytest.raises(SnapshotError):
        tiny.restore(world.snapshot())
    with pytest.raises(SnapshotError, match="a 'world' snapshot where a generator one belongs"):
        tiny.import_state(world.export_state(world.snapshot()))
    with pytest.raises(SnapshotError, match="a 'generator' snapshot where a world one belongs"):
        world.import_state(tiny.export_state(tiny.snapshot()))


def test_an_unknown_action_degrades_to_its_fallback_or_idle(backend: Backend) -> None:
    m = backend.manifest
    unknown = cond(backend, "moonwalk", emotion="smug")
    degraded = apply_fallbacks(unknown, m)
    assert (degraded.action, degraded.emotion) == ("idle", m.vocabulary.emotions[0])
    declared = msgspec.structs.replace(m, fallbacks={"moonwalk": "walk_left"})
    assert apply_fallbacks(unknown, declared).action == "walk_left"
    known = cond(backend, "wave")
    assert apply_fallbacks(known, m) is known
    a = play(backend.open_session(identity=0), [degraded])
    b = play(backend.open_session(identity=0), [cond(backend, "idle")])
    assert np.array_equal(a[0], b[0])
    with pytest.raises(ValueError, match="fallbacks to actions the backend lacks: moonwalk -> breakdance"):
        check_fallbacks(m.vocabulary, {"moonwalk": "breakdance"})


def test_malformed_conditions_and_identities_are_clear_errors(backend: Backend) -> None:
    session = backend.open_session(identity=0)
    n = backend.manifest.vocabulary.frames_per_chunk
    with pytest.raises(ConditionError, match=f"audio must hold {n} values"):
        session.generate(ChunkCondition(audio=(0.0,) * (n + 1)))
    with pytest.raises(ConditionError, match="gaze values must be finite"):
        session.generate(cond(backend, gaze=(2.0, 0.0)))
    with pytest.raises(ValueError, match="identity must be in"):
        backend.open_session(identity=99)
    pending = session.generate(cond(backend))
    assert pending is not None
    session.commit(pending)
    with pytest.raises(ValueError, match="does not follow"):
        session.commit(pending)  # already taken


def test_open_backend_names_what_is_wrong() -> None:
    cases = {
        ("nope", ()): "unknown backend 'nope'; known: tiny, world",
        (
            "world",
            ("speed=2",),
        ): "backend world has no option 'speed'; it takes: fps, chunk_frames, width, height",
        ("world", ("fps=fast",)): "backend option fps must be an integer, got 'fast'",
        ("world", ("fps=0",)): r"world option fps must be in \[1, 60\], got 0",
        ("world", ("width=5000",)): r"world option width must be in \[16, 1024\], got 5000",
        ("tiny", ("fps=16",)): "backend tiny has no option 'fps'; it takes: steps, linears",
        ("tiny", ("linears=int4",)): "linears must be one of auto, float, int8, not 'int4'",
        ("tiny", ("kernels=fast",)): "kernels must be one of auto, torch, onednn, not 'fast'",
        (
            "tiny",
            ("dit=/no/such.safetensors",),
        ): "backend option dit takes shipped or a weights file that exists",
        ("tiny", ("codec=fast",)): "backend option codec takes slim or full or a weights file that exists",
    }
    for (name, items), message in cases.items():
        with pytest.raises(ValueError, match=message):
            open_backend(name, parse_options(list(items)))
    with pytest.raises(ValueError, match="write it as NAME=VALUE"):
        parse_options(["fps"])
    with pytest.raises(ValueError, match="given twice"):
        parse_options(["fps=16", "fps=24"])


def test_world_at_its_default_clock_draws_the_training_world() -> None:
    """The world backend is the world the tiny model learnt: at 24 fps and 4-frame chunks of 128x128 its
    frames are ``simulate``'s, frame for frame."""
    backend = WorldBackend(warmup_chunks=1)
    conds = [cond(backend, a) for a in ("wave", "wave", "walk_right", "turn", "nod", "nod")]
    got = np.concatenate(play(backend.open_session(identity=3), conds))
    phases, last, phase = [], None, 0
    for c in conds:
        phase = next_phase(last, phase, c.action)
        phases.append(phase)
        last = c.action
    assert np.array_equal(got, simulate(encode(conds, phases), np.array([3])).frames[0])


def test_world_keeps_time_in_seconds_at_another_clock() -> None:
    """1.5 s of nodding at 16 fps / 12-frame chunks leaves the world where 1.5 s at 24 / 4 does."""
    native, odd = WorldBackend(warmup_chunks=1), WorldBackend(ODD, warmup_chunks=1)
    a, b = native.open_session(identity=1), odd.open_session(identity=1)
    play(a, [cond(native, "nod")] * 9)  # 36 frames at 24 fps
    play(b, [cond(odd, "nod")] * 2)  # 24 frames at 16 fps
    sa, sb = a.snapshot(), b.snapshot()
    assert sa.steps == sb.steps == 36 and sa.phase == sb.phase == 35
    assert sa.state.nod[0] == sb.state.nod[0] != 0.0
