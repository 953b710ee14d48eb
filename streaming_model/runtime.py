"""The streaming runtime: one session = one character on one call.

    gen = Generator.load()                      # shipped weights
    s = gen.open_session(identity=2, seed=7)    # prefills the reference into the pinned sink
    pending = s.generate(ChunkCondition(action="wave"), cancel=event)   # None if cancelled
    frames = s.commit(pending)                  # (4, 128, 128, 3) uint8; the cache takes the chunk
    s.rollback(2); snap = s.snapshot(); s.restore(snap)

A snapshot exports as plain numpy arrays plus msgspec metadata (``snap.export()`` and
``SessionSnapshot.from_export``), for storage in a format that cannot run code.

A session is used from one worker thread (torch thread count fixed by the caller); `cancel` may be set
from any thread and is checked before every denoise step and between transformer blocks, so work stops
within one denoise step. Nothing committed changes until commit().
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, cast, overload

import msgspec
import numpy as np
import torch

from .codec import Codec, to_pixels, to_uint8
from .condition import ChunkCondition, continuous_features, encode, next_phase
from .dit import AttendFn, DiT
from .kv_cache import CacheMeta, CacheMode, CacheState, KVCache, RollbackError, SnapshotError
from .linears import Linears, check_linears, with_linears
from .loading import CODEC_PATH, DIT_PATH, load_codec, load_dit
from .precision import compute_dtype, computing, held_for_compute
from .sampler import COMMIT_STEP, CONTEXT_T, DAMAGE_STEP, STEPS, levels, renoise, seeded_noise
from .world.episodes import reference_chunk
from .world.palette import NUM_IDENTITIES


class Cancelled(Exception):
    """Raised inside a denoise pass when the cancel flag is seen; generate() turns it into None."""


@dataclass(frozen=True)
class PendingChunk:
    """A generated, not yet committed chunk."""

    index: int  # chunk index in the session (frames 4*index .. 4*index+3)
    latent: torch.Tensor  # (1, 1, C, 16, 16)
    condition: ChunkCondition
    phase0: int
    voice: tuple[float, ...] = ()  # the voice of the frames before the chunk and of its 4 frames


@dataclass(frozen=True)
class SessionSnapshot:
    """Everything needed to continue a session exactly from a point."""

    cache: CacheState
    base: torch.Tensor  # the last committed chunk as the model saw it (or the reference latent)
    index: int
    last_action: str | None
    last_phase0: int
    seed: int
    voice_tail: tuple[float, ...] = ()  # the last voice values, which the next chunk's mouth still reads

    def export(self) -> tuple[SnapshotMeta, dict[str, np.ndarray]]:
        """The snapshot as plain data: its scalars, and copies of its tensors as numpy arrays (the cache's
        prefixed ``cache.``)."""
        cache_meta, cache_arrays = self.cache.export()
        meta = SnapshotMeta(
            cache=cache_meta,
            index=self.index,
            last_action=self.last_action,
            last_phase0=self.last_phase0,
            seed=self.seed,
            voice_tail=self.voice_tail,
        )
        arrays = {f"cache.{name}": array for name, array in cache_arrays.items()}
        arrays["base"] = self.base.detach().cpu().numpy().copy()
        return meta, arrays

    @classmethod
    def from_export(cls, meta: SnapshotMeta, arrays: dict[str, np.ndarray]) -> SessionSnapshot:
        """The snapshot ``export`` gave; ``SnapshotError`` if the arrays do not make one."""
        base = arrays.get("base")
        if base is None or base.dtype != np.float32 or base.ndim != 5:
            raise SnapshotError("a session snapshot needs its base latent: float32, 5 axes")
        cache = {name[len("cache.") :]: a for name, a in arrays.items() if name.startswith("cache.")}
        if len(cache) + 1 != len(arrays):
            raise SnapshotError(f"unexpected session snapshot arrays {sorted(arrays)}")
        if meta.index < 0 or meta.last_phase0 < 0:
            raise SnapshotError(f"chunk index {meta.index} or phase {meta.last_phase0} is out of range")
        return cls(
            CacheState.from_export(meta.cache, cache),
            torch.from_numpy(base.copy()),
            meta.index,
            meta.last_action,
            meta.last_phase0,
            meta.seed,
            meta.voice_tail,
        )


class SnapshotMeta(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The scalars of a ``SessionSnapshot``; its tensors travel as arrays beside it."""

    cache: CacheMeta
    index: int
    last_action: str | None
    last_phase0: int
    seed: int
    voice_tail: tuple[float, ...]


class Generator:
    """Holds the shipped models; opens sessions."""

    def __init__(self, dit: DiT, codec: Codec) -> None:
        self.dit = dit.eval()
        # Channels-last convolutions: the decoder took 30 ms a chunk instead of 50 in fp32 on one AVX2
        # thread, with bit-identical pixels.
        self.codec = codec.eval().to(memory_format=torch.channels_last)  # type: ignore[call-overload]  # torch accepts memory_format here; its stubs omit it
        self._dits: dict[Linears, DiT] = {}

    def dit_for(self, linears: Linears) -> DiT:
        """The transformer sessions run: its blocks' Linear layers in ``linears`` (``streaming_model.linears``)
        and the float ones held in the compute format (``precision.held_for_compute``; bit-identical to
        ``self.dit`` inside ``computing()``). Made on first use and shared by every session that asks for it;
        ``self.dit`` stays the fp32 model as loaded."""
        linears = check_linears(linears)
        if linears not in self._dits:
            self._dits[linears] = cast("DiT", held_for_compute(with_linears(self.dit, linears)))
        return self._dits[linears]

    @classmethod
    def load(cls, dit_path: Path = DIT_PATH, codec_path: Path = CODEC_PATH) -> Generator:
        """The default model from streaming_model/weights/ (WeightsError if missing or corrupt)."""
        dit, _ = load_dit(dit_path)
        return cls(dit, load_codec(codec_path))

    def open_session(
        self,
        identity: int | None = None,
        reference: np.ndarray | None = None,
        seed: int = 0,
        steps: int = STEPS,
        cache_mode: CacheMode = "write_time",
        journal: int = 8,
        cache_noise: float = 0.0,
        linears: Linears = "float",
    ) -> Session:
        """A new session whose identity comes from a reference chunk/image, or a built-in identity.

        ``linears``: what the transformer blocks' matrix products compute in (``streaming_model.linears``;
        ``float`` as trained, ``int8`` the faster dynamic quantisation).

        ``cache_noise`` damages the session on purpose (0 in every real one): seeded Gaussian noise of that
        many standard deviations of each committed chunk's keys and values is added to them before the
        cache takes them, so that an evaluation can show it tells a broken model from a sound one."""
        if reference is None:
            if identity is None or not 0 <= identity < NUM_IDENTITIES:
                raise ValueError(f"identity must be in [0, {NUM_IDENTITIES}) when no reference is given")
            reference = reference_chunk(np.array([identity]))[0]
        if not cache_noise >= 0.0:
            raise ValueError(f"cache_noise must be >= 0, got {cache_noise}")
        dit = self.dit_for(linears)
        return Session(self, reference, seed, steps, cache_mode, journal, cache_noise, dit)


class Session:
    """One streaming session: its cache, its seed, its chunk counter and condition history."""

    def __init__(
        self,
        gen: Generator,
        reference: np.ndarray,
        seed: int,
        steps: int,
        cache_mode: CacheMode,
        journal: int,
        cache_noise: float = 0.0,
        dit: DiT | None = None,
    ) -> None:
        self.dit, self.codec = (gen.dit_for("float") if dit is None else dit), gen.codec
        cfg = self.dit.cfg
        self.seed, self.levels, self.cache_noise = seed, levels(steps), cache_noise
        self.cache = KVCache(
            cfg.depth,
            cfg.heads,
            cfg.head_dim,
            cfg.tokens,
            cfg.window,
            cfg.max_distance,
            tables=self.dit.rope_tables,
            time_tables=self.dit.rope.time_angles,
            mode=cache_mode,
            journal=journal,
            dtype=compute_dtype(),
        )
        self.index = 0
        self.last_action: str | None = None
        self.last_phase0 = 0
        # The decoder draws each frame's mouth from the voice of that frame and of the ones before.
        self.voice_tail: tuple[float, ...] = (0.0,) * max(0, self.codec.cfg.voice_taps - 1)
        self._meta: deque[tuple[str | None, int, torch.Tensor, tuple[float, ...]]] = deque(maxlen=journal)
        self._base = torch.zeros(0)  # set by the prefill
        self._latent_shape = (1, 1, cfg.latent_channels, cfg.grid, cfg.grid)
        self._prefill(reference)

    def _prefill(self, reference: np.ndarray) -> None:
        ref = np.asarray(reference)
        if ref.shape == (128, 128, 3):
            ref = np.repeat(ref[None], 4, axis=0)
        if ref.shape != (4, 128, 128, 3) or ref.dtype != np.uint8:
            raise ValueError(
                f"reference must be uint8 (128, 128, 3) or (4, 128, 128, 3), got {ref.dtype} {ref.shape}"
            )
        with computing():
            z = self.codec.encode(to_pixels(torch.from_numpy(ref))[None]).float()[:, None]
            cos, sin = self.dit.rope_tables(torch.zeros(1))
            kv = self.dit.keys_values(z, self.dit.reference_cond(1), cos, sin, self.cache.self_attend)
        self.cache.prefill_sink(kv)
        self._base = z  # the first chunk starts from the reference pose

    def _cond(self, cond: ChunkCondition, phase0: int, t: float) -> torch.Tensor:
        codes = encode([cond], [phase0])
        cont = torch.from_numpy(continuous_features(codes))
        return self.dit.embed_cond(
            torch.from_numpy(codes.action), torch.from_numpy(codes.emotion), cont, torch.full((1, 1), t)
        )

    def generate(self, cond: ChunkCondition, cancel: threading.Event | None = None) -> PendingChunk | None:
        """Denoise the next chunk under cond; None if cancel was set before it finished.

        Raises ConditionError for a malformed condition. The committed cache is never modified here.
        """
        return generate_many([self], [cond], [cancel])[0]

    @overload
    def commit(self, pending: PendingChunk, decode: Literal[True] = True) -> np.ndarray: ...
    @overload
    def commit(self, pending: PendingChunk, decode: bool) -> np.ndarray | None: ...
    def commit(self, pending: PendingChunk, decode: bool = True) -> np.ndarray | None:
        """Write the chunk into the cache (one pass over it at the context noise level, as far as the last
        block's keys and values) and decode it."""
        commit_many([self], [pending])
        return self.decode(pending) if decode else None

    def _position_tables(self) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin (64, hd/2) of the next chunk's tokens at the position the cache gives it."""
        return self.dit.rope_tables(torch.tensor([float(self.cache.next_position())], dtype=torch.float64))

    def _take(
        self, pending: PendingChunk, kv: list[tuple[torch.Tensor, torch.Tensor]], ctx: torch.Tensor
    ) -> None:
        """Make ``pending`` committed: its keys and values into the cache, ``ctx`` (the chunk as the next
        one sees it) the new base."""
        self.cache.commit(self._damaged(kv) if self.cache_noise else kv)
        self._meta.append((self.last_action, self.last_phase0, self._base, self.voice_tail))
        self._base = ctx
        self.voice_tail = pending.voice[len(pending.voice) - len(self.voice_tail) :]
        self.last_action, self.last_phase0 = pending.condition.action, pending.phase0
        self.index += 1

    def _damaged(
        self, kv: list[tuple[torch.Tensor, torch.Tensor]]
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The chunk's keys and values with the ``cache_noise`` the session was opened with added (seeded
        per chunk, so a damaged session is as repeatable as a sound one)."""
        noise = seeded_noise(self.seed, self.index, DAMAGE_STEP, (len(kv), 2, *kv[0][0].shape))
        return [
            (k + self.cache_noise * k.float().std() * n[0], v + self.cache_noise * v.float().std() * n[1])
            for (k, v), n in zip(kv, noise, strict=True)
        ]

    def decode(self, pending: PendingChunk) -> np.ndarray:
        """Pixels of a chunk: (4, 128, 128, 3) uint8."""
        return decode_many(self.codec, [pending])[0]

    def step(self, cond: ChunkCondition) -> np.ndarray:
        """generate + commit + decode in one call (no cancellation)."""
        pending = self.generate(cond)
        assert pending is not None
        return self.commit(pending)

    def rollback(self, k: int) -> None:
        """Forget the last k committed chunks; the next generate continues from there."""
        if k > len(self._meta):
            raise RollbackError(
                f"cannot roll back {k} chunks: the journal holds the last {len(self._meta)} commits"
            )
        self.cache.rollback(k)
        for _ in range(k):
            self.last_action, self.last_phase0, self._base, self.voice_tail = self._meta.pop()
        self.index -= k

    def snapshot(self) -> SessionSnapshot:
        """The session's committed state (cache, chunk index, condition phase, seed)."""
        return SessionSnapshot(
            self.cache.snapshot(),
            self._base.clone(),
            self.index,
            self.last_action,
            self.last_phase0,
            self.seed,
            self.voice_tail,
        )

    def restore(self, snap: SessionSnapshot) -> None:
        """Continue from a snapshot; the rollback journal is cleared (it described another history).
        ``SnapshotError`` (nothing changed) if it is of a session of another model."""
        if snap.base.shape != self._base.shape:
            raise SnapshotError(
                f"the snapshot's latent has shape {tuple(snap.base.shape)}; this model's is "
                f"{tuple(self._base.shape)}"
            )
        self.cache.restore(snap.cache)
        self.cache.journal.clear()
        self._meta.clear()
        self._base = snap.base.clone()
        self.index, self.last_action, self.last_phase0, self.seed, self.voice_tail = (
            snap.index,
            snap.last_action,
            snap.last_phase0,
            snap.seed,
            # A snapshot taken before the decoder read the voice holds none: silence before it.
            snap.voice_tail
            if len(snap.voice_tail) == len(self.voice_tail)
            else (0.0,) * len(self.voice_tail),
        )


def batchable(sessions: Sequence[Session]) -> bool:
    """Whether ``sessions`` can be run in one batch: one transformer, one decoder, one sampler."""
    first = sessions[0]
    return all(s.dit is first.dit and s.codec is first.codec and s.levels == first.levels for s in sessions)


def _check_batch(sessions: Sequence[Session], *others: Sequence[object]) -> None:
    if not sessions or any(len(o) != len(sessions) for o in others):
        raise ValueError(
            f"a batch of {len(sessions)} sessions needs one entry each, got {[len(o) for o in others]}"
        )
    if not batchable(sessions):
        raise ValueError("sessions of different models, decoders or step counts cannot share a batch")


def _tables(sessions: Sequence[Session]) -> tuple[torch.Tensor, torch.Tensor]:
    """Each session's position tables stacked as (B, 1, 64, hd/2): one row per session, broadcast over
    the heads."""
    tables = [s._position_tables() for s in sessions]
    return torch.stack([cos for cos, _ in tables])[:, None], torch.stack([sin for _, sin in tables])[:, None]


def _attend_each(sessions: Sequence[Session], cancels: Sequence[threading.Event | None] = ()) -> AttendFn:
    """Attention of each batch row over its own session's cache (rows never see each other). With
    ``cancels``, ``Cancelled`` is raised before a block once every row's flag is set: an interrupt need
    not wait for a whole denoise step."""
    flags = [flag for flag in cancels if flag is not None]
    every = len(flags) == len(sessions)  # a row without a flag can never be cancelled

    def attend(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if every and all(flag.is_set() for flag in flags):
            raise Cancelled
        if len(sessions) == 1:
            return sessions[0].cache.attend(layer, q, k, v)
        return torch.cat(
            [s.cache.attend(layer, q[i : i + 1], k[i : i + 1], v[i : i + 1]) for i, s in enumerate(sessions)]
        )

    return attend


def generate_many(
    sessions: Sequence[Session],
    conds: Sequence[ChunkCondition],
    cancels: Sequence[threading.Event | None],
) -> list[PendingChunk | None]:
    """The next chunk of every session, each under its condition, denoised in one batched pass per step
    (``batchable`` sessions; a session's row reads only its own cache, seed and chunk index, and the
    matrix products give each row the bits they give it alone: tests/streaming_model/test_batched.py).

    A session whose ``cancel`` is set leaves the batch before the next denoise step and gets None; once
    every row's flag is set the pass stops between transformer blocks. The committed caches are never
    modified here. ``ConditionError`` for a malformed condition (then nothing is generated)."""
    _check_batch(sessions, conds, cancels)
    for cond in conds:
        cond.validate()
    first = sessions[0]
    phases = [
        next_phase(s.last_action, s.last_phase0, c.action) for s, c in zip(sessions, conds, strict=True)
    ]
    live = list(range(len(sessions)))
    cos, sin = _tables(sessions)
    base = torch.cat([s._base for s in sessions])
    x0 = torch.zeros((len(sessions), *first._latent_shape[1:]))  # pure noise at t = 1 whatever x0 is

    def cancelled(i: int) -> bool:
        flag = cancels[i]
        return flag is not None and flag.is_set()

    try:
        with computing():
            for step, t in enumerate(first.levels):
                keep = [j for j, i in enumerate(live) if not cancelled(i)]
                if not keep:
                    raise Cancelled
                if len(keep) < len(live):  # rows leave between steps, whatever their position
                    rows = torch.tensor(keep, dtype=torch.long)
                    live = [live[j] for j in keep]
                    x0, base, cos, sin = x0[rows], base[rows], cos[rows], sin[rows]
                running = [sessions[i] for i in live]
                attend = _attend_each(running, [cancels[i] for i in live])
                noise = torch.cat([seeded_noise(s.seed, s.index, step, s._latent_shape) for s in running])
                c = torch.cat([sessions[i]._cond(conds[i], phases[i], t) for i in live])
                x0, _ = first.dit.run(renoise(x0, noise, t), c, cos, sin, attend, base=base)
    except Cancelled:
        return [None] * len(sessions)
    out: list[PendingChunk | None] = [None] * len(sessions)
    for row, i in enumerate(live):
        s, cond = sessions[i], conds[i]
        out[i] = PendingChunk(s.index, x0[row : row + 1], cond, phases[i], s.voice_tail + cond.voice)
    return out


def commit_many(sessions: Sequence[Session], pendings: Sequence[PendingChunk]) -> None:
    """Commit each session's pending chunk: one batched pass at the context noise level, as far as the
    last block's keys and values, then each session's cache takes its row. ``ValueError`` (nothing
    committed) if a pending chunk does not follow its session."""
    _check_batch(sessions, pendings)
    for s, pending in zip(sessions, pendings, strict=True):
        if pending.index != s.index:
            raise ValueError(
                f"pending chunk {pending.index} does not follow the session (at chunk {s.index})"
            )
    first = sessions[0]
    cos, sin = _tables(sessions)
    noise = torch.cat([seeded_noise(s.seed, s.index, COMMIT_STEP, s._latent_shape) for s in sessions])
    with computing():
        ctx = renoise(torch.cat([p.latent for p in pendings]), noise, CONTEXT_T)
        c = torch.cat(
            [s._cond(p.condition, p.phase0, CONTEXT_T) for s, p in zip(sessions, pendings, strict=True)]
        )
        # Only the keys and values are kept: each chunk's prediction is its pending latent already.
        kv = first.dit.keys_values(ctx, c, cos, sin, _attend_each(sessions))
        for i, (s, pending) in enumerate(zip(sessions, pendings, strict=True)):
            s._take(pending, [(k[i : i + 1], v[i : i + 1]) for k, v in kv], ctx[i : i + 1])


def decode_many(codec: Codec, pendings: Sequence[PendingChunk]) -> list[np.ndarray]:
    """Pixels of chunks, decoded in one batch: (4, 128, 128, 3) uint8 each."""
    with computing():
        voice = torch.tensor([p.voice for p in pendings]) if pendings[0].voice else None
        px = codec.decode(torch.cat([p.latent[:, 0] for p in pendings]), voice)
    return [to_uint8(frames).numpy() for frames in px]
