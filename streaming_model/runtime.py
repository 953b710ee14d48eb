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
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, cast, overload

import msgspec
import numpy as np
import torch

from .allocator import keep_freed_pages
from .codec import Codec, to_pixels
from .condition import ChunkCondition, continuous_features, encode
from .dit import DiT
from .kernels import KernelsChoice, attention_for, chosen_kernels, with_kernels
from .kv_cache import CacheMeta, CacheMode, CacheState, KVCache, RollbackError, SnapshotError
from .linears import Linears, LinearsChoice, chosen_linears, with_linears
from .loading import DEFAULT_CODEC_PATH, DIT_PATH, load_codec, load_dit
from .manifest import build_manifest
from .passes import (
    CommitPass,
    PendingChunk,
    check_commit_pass,
    commit_many,
    decode_many,
    generate_many,
    write_held,
)
from .precision import compute_dtype, computing, held_for_compute
from .sampler import DAMAGE_STEP, STEPS, levels, seeded_noise
from .upsample import Upsample, with_upsample
from .world.episodes import reference_chunk
from .world.palette import NUM_IDENTITIES


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

    def __init__(
        self, dit: DiT, codec: Codec, upsample: Upsample = "parity", kernels: KernelsChoice = "auto"
    ) -> None:
        """``upsample``: how the decoder's output layer computes (``streaming_model.upsample``); ``kernels``:
        what the transformer's attention and MLP run on (``streaming_model.kernels``; ``auto`` as this
        machine chooses, ``self.kernels`` what was chosen)."""
        # The process that runs the model keeps its freed pages: a chunk otherwise faults a thousand in.
        keep_freed_pages()
        self.dit = dit.eval()
        # Channels-last convolutions: the decoder took 30 ms a chunk instead of 50 in fp32 on one AVX2
        # thread, with bit-identical pixels.
        self.codec = with_upsample(codec, upsample).eval().to(memory_format=torch.channels_last)  # type: ignore[call-overload]  # torch accepts memory_format here; its stubs omit it
        self.kernels = chosen_kernels(kernels)
        self._dits: dict[Linears, DiT] = {}
        self.vocabulary = build_manifest(scene=dit.cfg.scene_dim > 0)
        """What a condition may name: the scene and the actions toward it only if the weights read them."""

    def dit_for(self, linears: LinearsChoice) -> DiT:
        """The transformer sessions run: its blocks' Linear layers in ``linears`` (``streaming_model.linears``;
        ``auto`` as this machine chooses), the float ones held in the compute format
        (``precision.held_for_compute``; bit-identical to ``self.dit`` inside ``computing()``) and its MLPs
        on ``self.kernels``. Made on first use and shared by every session that asks for it; ``self.dit``
        stays the fp32 model as loaded."""
        chosen = chosen_linears(linears)
        if chosen not in self._dits:
            held = cast("DiT", held_for_compute(with_linears(self.dit, chosen)))
            self._dits[chosen] = with_kernels(held, self.kernels)
        return self._dits[chosen]

    @classmethod
    def load(
        cls,
        dit_path: Path = DIT_PATH,
        codec_path: Path = DEFAULT_CODEC_PATH,
        upsample: Upsample = "parity",
        kernels: KernelsChoice = "auto",
    ) -> Generator:
        """The default model from streaming_model/weights/ (WeightsError if missing or corrupt)."""
        dit, _ = load_dit(dit_path)
        return cls(dit, load_codec(codec_path), upsample, kernels)

    def open_session(
        self,
        identity: int | None = None,
        reference: np.ndarray | None = None,
        seed: int = 0,
        steps: int = STEPS,
        cache_mode: CacheMode = "write_time",
        journal: int = 8,
        cache_noise: float = 0.0,
        linears: LinearsChoice = "float",
        commit_pass: CommitPass = "fused",
    ) -> Session:
        """A new session whose identity comes from a reference chunk/image, or a built-in identity.

        ``commit_pass``: ``fused`` writes a committed chunk to the cache in the pass that generates the
        next one (``generate_many``), ``apart`` in a pass of its own at ``commit`` (the path before).

        ``linears``: what the transformer blocks' matrix products compute in (``streaming_model.linears``;
        ``float`` as trained, ``int8`` the faster dynamic quantisation, ``auto`` this machine's choice, as a
        served session's).

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
        return Session(
            self,
            reference,
            seed,
            steps,
            cache_mode,
            journal,
            cache_noise,
            dit,
            check_commit_pass(commit_pass),
        )


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
        commit_pass: CommitPass = "fused",
    ) -> None:
        self.commit_pass = commit_pass
        self.held: PendingChunk | None = None
        """A committed chunk the cache has not taken yet (``commit_pass="fused"``): the next generation's
        pass writes it (``generate_many``), and anything that reads the committed state settles it first."""
        self.dit, self.codec = (gen.dit_for("float") if dit is None else dit), gen.codec
        self.vocabulary = gen.vocabulary
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
            attention=attention_for(gen.kernels),
        )
        self.index = 0
        self.last_action: str | None = None
        self.last_phase0 = 0
        # The decoder draws each frame's mouth from the voice of that frame and of the ones before.
        self.voice_tail: tuple[float, ...] = (0.0,) * max(0, self.codec.cfg.voice_taps - 1)
        self._meta: deque[tuple[str | None, int, torch.Tensor, tuple[float, ...]]] = deque(maxlen=journal)
        self.base = torch.zeros(0)
        """The last chunk the cache took, as the model saw it (the reference latent before any): the next
        chunk's base (``DiT.run``). Set by the prefill."""
        self.latent_shape = (1, 1, cfg.latent_channels, cfg.grid, cfg.grid)
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
        self.base = z  # the first chunk starts from the reference pose

    def condition_vector(self, cond: ChunkCondition, phase0: int, t: float) -> torch.Tensor:
        """The transformer's condition (1, 1, w) for a chunk under ``cond`` at phase ``phase0`` and noise level ``t``."""
        codes = encode([cond], [phase0], self.vocabulary)
        cont = torch.from_numpy(continuous_features(codes, scene=self.dit.cfg.scene_dim > 0))
        return self.dit.embed_cond(
            torch.from_numpy(codes.action), torch.from_numpy(codes.emotion), cont, torch.full((1, 1), t)
        )

    def generate(self, cond: ChunkCondition, cancel: threading.Event | None = None) -> PendingChunk | None:
        """Denoise the next chunk under cond; None if cancel was set before it finished (a held chunk may
        have been written to the cache meanwhile: the committed state is the same either way).

        Raises ConditionError for a malformed condition. Nothing committed changes here: the cache may take
        the held chunk (``passes.generate_many``), which is committed already.
        """
        return generate_many([self], [cond], [cancel])[0]

    @overload
    def commit(self, pending: PendingChunk, decode: Literal[True] = True) -> np.ndarray: ...
    @overload
    def commit(self, pending: PendingChunk, decode: bool) -> np.ndarray | None: ...
    def commit(self, pending: PendingChunk, decode: bool = True) -> np.ndarray | None:
        """Make the chunk part of the session and decode it. The cache takes it in one pass over it at the
        context noise level, as far as the last block's keys and values: here (``commit_pass="apart"``),
        or, fused, in the next generation's pass."""
        commit_many([self], [pending])
        return self.decode(pending) if decode else None

    def hold(self, pending: PendingChunk) -> None:
        """``pending`` is committed: the session goes on after it, and the cache takes it later
        (``settle``, or the next generation's pass). The chunk before it must be settled."""
        assert self.held is None, "a chunk is still held"
        self.held = pending
        self.index += 1

    def last_condition(self) -> tuple[str | None, int]:
        """The action and phase of the last committed chunk (held or not): what the next chunk's phase
        follows."""
        if self.held is not None:
            return self.held.condition.action, self.held.phase0
        return self.last_action, self.last_phase0

    def take(
        self, pending: PendingChunk, kv: list[tuple[torch.Tensor, torch.Tensor]], ctx: torch.Tensor
    ) -> None:
        """The held chunk ``pending`` into the cache (its keys and values) and the state after it."""
        self.cache.commit(self._damaged(kv, pending.index) if self.cache_noise else kv)
        self.took(pending, ctx)

    def took(self, pending: PendingChunk, ctx: torch.Tensor) -> None:
        """The state after the held chunk ``pending``, which the cache has taken: ``ctx`` (the chunk as
        the next one sees it) the new base."""
        self._meta.append((self.last_action, self.last_phase0, self.base, self.voice_tail))
        self.base = ctx
        self.voice_tail = pending.voice[len(pending.voice) - len(self.voice_tail) :]
        self.last_action, self.last_phase0 = pending.condition.action, pending.phase0
        self.held = None

    def settle(self) -> None:
        """Have the cache take the held chunk now, in a pass of its own (before the state is read)."""
        if self.held is not None:
            write_held([self])

    def _damaged(
        self, kv: list[tuple[torch.Tensor, torch.Tensor]], index: int
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Chunk ``index``'s keys and values with the ``cache_noise`` the session was opened with added
        (seeded per chunk, so a damaged session is as repeatable as a sound one)."""
        noise = seeded_noise(self.seed, index, DAMAGE_STEP, (len(kv), 2, *kv[0][0].shape))
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
        self.settle()
        if k > len(self._meta):
            raise RollbackError(
                f"cannot roll back {k} chunks: the journal holds the last {len(self._meta)} commits"
            )
        self.cache.rollback(k)
        for _ in range(k):
            self.last_action, self.last_phase0, self.base, self.voice_tail = self._meta.pop()
        self.index -= k

    def snapshot(self) -> SessionSnapshot:
        """The session's committed state (cache, chunk index, condition phase, seed)."""
        self.settle()
        return SessionSnapshot(
            self.cache.snapshot(),
            self.base.clone(),
            self.index,
            self.last_action,
            self.last_phase0,
            self.seed,
            self.voice_tail,
        )

    def restore(self, snap: SessionSnapshot) -> None:
        """Continue from a snapshot; the rollback journal is cleared (it described another history).
        ``SnapshotError`` (nothing changed) if it is of a session of another model."""
        if snap.base.shape != self.base.shape:
            raise SnapshotError(
                f"the snapshot's latent has shape {tuple(snap.base.shape)}; this model's is "
                f"{tuple(self.base.shape)}"
            )
        self.cache.restore(snap.cache)
        self.held = None
        self.cache.journal.clear()
        self._meta.clear()
        self.base = snap.base.clone()
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
