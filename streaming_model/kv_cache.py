"""A ring-buffer KV cache for one streaming session, with write-time maintenance.

Layout per layer (slots of one chunk's tokens): slot 0 is the pinned reference (sink); slots 1..W form
a ring of the W most recent committed chunks. The cache owns time positions: the sink sits at 0, each
committed chunk at the next position; before positions leave the trained range the ring is rebased.

write_time mode: at commit, keys are rotated (RoPE) for their position and keys and values are quantized
to int8 with per-token, per-head scales, ONCE; a bf16 attention view is refreshed for that slot only.
Attention then reads the view as is: nothing is re-rotated, re-quantized or shifted per call.

naive mode (the reference to measure against): the cache keeps unrotated keys and on every attention
call re-rotates and re-quantizes the whole window and concatenates it, as the paper's baseline did.

Both modes run the same rotate/quantize functions on the same inputs, so until the first rebase they
give bit-identical attention inputs.

A ``CacheState`` exports as plain numpy arrays plus a small msgspec ``CacheMeta`` (``export`` /
``CacheState.from_export``), which a caller can store in a format that cannot run code.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import msgspec
import numpy as np
import torch
from torch.nn import functional as F

from .rope import cos_sin, rotate

CacheMode = Literal["write_time", "naive"]
Tables = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
TimeTables = Callable[[float, int], torch.Tensor]
Attention = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
"""softmax(q k^T / sqrt(d)) v of (1, H, T, D) queries, keys and values (``streaming_model.kernels``)."""


class RollbackError(ValueError):
    """Rolling back further than the journal (or the session) reaches."""


class SnapshotError(ValueError):
    """Exported snapshot arrays or metadata that do not make a snapshot this cache (or session) can take."""


class CacheMeta(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The scalars of a ``CacheState``; its tensors travel as arrays beside it (see ``CacheState.export``)."""

    count: int
    pos_next: int


_ARRAY_DTYPES: dict[str, np.dtype] = {
    "k_q": np.dtype(np.int8),
    "k_s": np.dtype(np.float32),
    "v_q": np.dtype(np.int8),
    "v_s": np.dtype(np.float32),
    "slot_pos": np.dtype(np.float64),
    "raw_k": np.dtype(np.float32),  # naive mode only
    "raw_v": np.dtype(np.float32),
}
_NAIVE_ONLY = frozenset({"raw_k", "raw_v"})


def quantize(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """int8 values and float32 scales per token per head (the last axis is the head dimension)."""
    xf = x.float()
    scale = xf.abs().amax(-1, keepdim=True).clamp_min(1e-8) / 127.0
    return torch.round(xf / scale).clamp_(-127, 127).to(torch.int8), scale


def dequantize(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Inverse of quantize, in the attention dtype."""
    return (q.float() * scale).to(dtype)


@dataclass
class CacheState:
    """Everything committed: what a snapshot copies and a rollback restores."""

    k_q: torch.Tensor  # (L, H, S*T, D) int8 rotated keys (write_time mode; unused in naive mode)
    k_s: torch.Tensor  # (L, H, S*T, 1) float32
    v_q: torch.Tensor
    v_s: torch.Tensor
    raw_k: torch.Tensor | None  # naive mode: unrotated keys (L, H, S*T, D)
    raw_v: torch.Tensor | None
    slot_pos: torch.Tensor  # (S,) float64 time position per slot
    count: int  # committed chunks (the sink not counted)
    pos_next: int  # time position of the next chunk

    def clone(self) -> CacheState:
        """A deep copy."""

        def c(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.clone()

        return CacheState(
            self.k_q.clone(),
            self.k_s.clone(),
            self.v_q.clone(),
            self.v_s.clone(),
            c(self.raw_k),
            c(self.raw_v),
            self.slot_pos.clone(),
            self.count,
            self.pos_next,
        )

    def export(self) -> tuple[CacheMeta, dict[str, np.ndarray]]:
        """The state as plain data: its scalars, and a copy of each tensor as a numpy array."""
        tensors = {name: getattr(self, name) for name in _ARRAY_DTYPES}
        arrays = {name: t.detach().cpu().numpy().copy() for name, t in tensors.items() if t is not None}
        return CacheMeta(count=self.count, pos_next=self.pos_next), arrays

    @classmethod
    def from_export(cls, meta: CacheMeta, arrays: dict[str, np.ndarray]) -> CacheState:
        """The state ``export`` gave; ``SnapshotError`` if the arrays do not make a consistent cache."""
        names = set(arrays)
        required = set(_ARRAY_DTYPES) - _NAIVE_ONLY
        if not required <= names or not names <= set(_ARRAY_DTYPES) or len(names & _NAIVE_ONLY) == 1:
            raise SnapshotError(f"cache arrays {sorted(names)} are not those of a cache")
        for name, array in arrays.items():
            if array.dtype != _ARRAY_DTYPES[name]:
                raise SnapshotError(f"cache array {name} is {array.dtype}, not {_ARRAY_DTYPES[name]}")
        keys = arrays["k_q"].shape
        scales = (*keys[:-1], 1)
        slots = arrays["slot_pos"].shape
        if (
            len(keys) != 4
            or arrays["v_q"].shape != keys
            or arrays["k_s"].shape != scales
            or arrays["v_s"].shape != scales
            or any(arrays[name].shape != keys for name in names & _NAIVE_ONLY)
            or len(slots) != 1
            or slots[0] < 2
            or keys[2] % slots[0]
        ):
            raise SnapshotError(
                f"cache arrays of shapes {[arrays[n].shape for n in sorted(names)]} do not fit"
            )
        if meta.count < 0 or meta.pos_next < 1:
            raise SnapshotError(f"cache counters {meta.count}, {meta.pos_next} are out of range")

        t = {name: torch.from_numpy(array.copy()) for name, array in arrays.items()}
        return cls(
            k_q=t["k_q"],
            k_s=t["k_s"],
            v_q=t["v_q"],
            v_s=t["v_s"],
            raw_k=t.get("raw_k"),
            raw_v=t.get("raw_v"),
            slot_pos=t["slot_pos"],
            count=meta.count,
            pos_next=meta.pos_next,
        )


class KVCache:
    """Sink + ring KV cache with a bounded journal for rollback."""

    def __init__(
        self,
        layers: int,
        heads: int,
        head_dim: int,
        tokens: int,
        window: int,
        max_distance: int,
        tables: Tables,
        time_tables: TimeTables,
        mode: CacheMode = "write_time",
        journal: int = 8,
        dtype: torch.dtype = torch.bfloat16,
        attention: Attention = F.scaled_dot_product_attention,
    ) -> None:
        if mode not in ("write_time", "naive"):
            raise ValueError(f"unknown cache mode {mode!r}; use 'write_time' or 'naive'")
        if max_distance < window + 2:
            raise ValueError(f"max_distance {max_distance} leaves no room for a window of {window}")
        self.mode, self.T, self.W = mode, tokens, window
        self.attention = attention
        self.max_distance, self.tables, self.time_tables, self.dtype = (
            max_distance,
            tables,
            time_tables,
            dtype,
        )
        slots = 1 + window
        shape = (layers, heads, slots * tokens, head_dim)
        naive = mode == "naive"
        self.state = CacheState(
            k_q=torch.zeros(shape, dtype=torch.int8),
            k_s=torch.zeros((*shape[:-1], 1)),
            v_q=torch.zeros(shape, dtype=torch.int8),
            v_s=torch.zeros((*shape[:-1], 1)),
            raw_k=torch.zeros(shape) if naive else None,  # float32, as the model hands them over
            raw_v=torch.zeros(shape) if naive else None,
            slot_pos=torch.full((slots,), float("nan"), dtype=torch.float64),
            count=0,
            pos_next=1,
        )
        # Attention view: [sink | pending | ring]; the pending chunk sits next to the sink so that the
        # valid part is always one contiguous prefix while the ring fills.
        view_shape = (layers, 1, heads, (slots + 1) * tokens, head_dim)
        self.view_k = torch.zeros(view_shape, dtype=dtype)
        self.view_v = torch.zeros(view_shape, dtype=dtype)
        self.journal: deque[CacheState] = deque(maxlen=journal)
        self.has_sink = False
        self._open: tuple[int, float, tuple[torch.Tensor, torch.Tensor]] | None = None  # a commit begun
        self.maintenance_s = 0.0  # time spent rotating/quantizing/assembling the cache (both modes)

    # --- layout helpers -----------------------------------------------------------------------
    def _tok(self, slot: int) -> slice:
        return slice(slot * self.T, (slot + 1) * self.T)

    def _view(self, slot: int) -> slice:
        s = 0 if slot == 0 else slot + 1
        return slice(s * self.T, (s + 1) * self.T)

    def filled(self) -> int:
        """Ring slots holding a committed chunk."""
        return min(self.state.count, self.W)

    def next_position(self) -> int:
        """Time position the next chunk is generated at (owned by the cache)."""
        return self.state.pos_next

    # --- writes -------------------------------------------------------------------------------
    def _write_slot(self, slot: int, kv_raw: list[tuple[torch.Tensor, torch.Tensor]], pos: float) -> None:
        tables = self.tables(torch.tensor([pos], dtype=torch.float64))
        for layer, (k, v) in enumerate(kv_raw):
            self._write_layer(slot, layer, k, v, tables)
        self.state.slot_pos[slot] = pos

    def _write_layer(
        self,
        slot: int,
        layer: int,
        k: torch.Tensor,
        v: torch.Tensor,
        tables: tuple[torch.Tensor, torch.Tensor],
    ) -> None:
        st, tok = self.state, self._tok(slot)
        if self.mode == "naive":  # keep raw keys; every read redoes the work
            assert st.raw_k is not None and st.raw_v is not None
            st.raw_k[layer, :, tok] = k[0]
            st.raw_v[layer, :, tok] = v[0]
            return
        kq, ks = quantize(rotate(k[0], *tables))
        vq, vs = quantize(v[0])
        st.k_q[layer, :, tok], st.k_s[layer, :, tok] = kq, ks
        st.v_q[layer, :, tok], st.v_s[layer, :, tok] = vq, vs
        self.view_k[layer, 0, :, self._view(slot)] = dequantize(kq, ks, self.dtype)
        self.view_v[layer, 0, :, self._view(slot)] = dequantize(vq, vs, self.dtype)

    def prefill_sink(self, kv_raw: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Pin the reference chunk's keys and values at position 0."""
        t0 = time.perf_counter()
        self._write_slot(0, kv_raw, 0.0)
        self.has_sink = True
        self.maintenance_s += time.perf_counter() - t0

    def commit(self, kv_raw: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Commit the pending chunk's keys/values (unrotated keys, (1, H, T, D) per layer)."""
        self.begin_commit()
        for layer, (k, v) in enumerate(kv_raw):
            self.commit_layer(layer, k, v)
        self.end_commit()

    # A commit layer by layer: for a pass that commits a chunk and generates the next one at once, each
    # layer's keys and values go in as soon as they are known, before the next chunk attends in that layer.
    def layered(self) -> bool:
        """Whether the next commit can be written layer by layer while the chunk after it attends
        (``attend_next``): on the write-time path, when that commit moves no position (no rebase)."""
        return self.mode == "write_time" and self.has_sink and self.state.pos_next + 1 <= self.max_distance

    def begin_commit(self) -> None:
        """Start committing the pending chunk: the state as it is goes to the journal; ``commit_layer``
        for every layer, then ``end_commit`` (or ``abort_commit``) follow."""
        if not self.has_sink:
            raise RuntimeError("commit before the reference was prefilled")
        t0 = time.perf_counter()
        self.journal.append(self.state.clone())
        pos = float(self.state.pos_next)
        self._open = (
            1 + self.state.count % self.W,
            pos,
            self.tables(torch.tensor([pos], dtype=torch.float64)),
        )
        self.maintenance_s += time.perf_counter() - t0

    def commit_layer(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """One layer of the commit begun: its unrotated keys and values, (1, H, T, D)."""
        assert self._open is not None, "commit_layer outside begin_commit / end_commit"
        t0 = time.perf_counter()
        slot, _, tables = self._open
        self._write_layer(slot, layer, k, v, tables)
        self.maintenance_s += time.perf_counter() - t0

    def end_commit(self) -> None:
        """The commit begun is whole: the chunk takes its slot and position (a rebase follows when the
        next position would leave the trained range)."""
        assert self._open is not None, "end_commit without begin_commit"
        t0 = time.perf_counter()
        slot, pos, _ = self._open
        self._open = None
        st = self.state
        st.slot_pos[slot] = pos
        st.count += 1
        st.pos_next += 1
        if st.pos_next > self.max_distance:
            self._rebase(st.pos_next - (self.W + 1))
        self.maintenance_s += time.perf_counter() - t0

    def abort_commit(self) -> None:
        """Undo the commit begun (its layers written so far included): the cache as before ``begin_commit``."""
        assert self._open is not None, "abort_commit without begin_commit"
        self._open = None
        self.restore(self.journal.pop())

    def _rebase(self, delta: int) -> None:
        """Move every ring chunk back in time by delta (the sink stays at 0)."""
        st = self.state
        if self.mode == "write_time":
            cos, sin = cos_sin(self.time_tables(-float(delta), self.T))
            for slot in range(1, 1 + self.filled()):
                tok = self._tok(slot)
                k = dequantize(st.k_q[:, :, tok], st.k_s[:, :, tok], torch.float32)
                kq, ks = quantize(rotate(k, cos, sin))
                st.k_q[:, :, tok], st.k_s[:, :, tok] = kq, ks
                self.view_k[:, 0, :, self._view(slot)] = dequantize(kq, ks, self.dtype)
        st.slot_pos[1:] -= delta
        st.pos_next -= delta

    # --- reads --------------------------------------------------------------------------------
    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Attention of the pending chunk (q, k, v rotated for its position, (1, H, T, D)) over the
        sink, the committed window and itself."""
        if self.mode == "write_time":
            vk, vv = self.view_k[layer], self.view_v[layer]
            vk[:, :, self.T : 2 * self.T] = k
            vv[:, :, self.T : 2 * self.T] = v
            n = (2 + self.filled()) * self.T
            return self.attention(q, vk[:, :, :n], vv[:, :, :n])
        t0 = time.perf_counter()
        keys, values = self._naive_window(layer)
        keys.insert(1, k)
        values.insert(1, v)
        kk, vv2 = torch.cat(keys, dim=2), torch.cat(values, dim=2)
        self.maintenance_s += time.perf_counter() - t0
        return self.attention(q, kk, vv2)

    def attend_next(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Attention of the chunk after the one being committed (``begin_commit``; its ``layer`` written):
        over the sink, the window as it is with that chunk in it, and itself (write-time path only)."""
        assert self._open is not None, "attend_next outside a layered commit"
        vk, vv = self.view_k[layer], self.view_v[layer]
        vk[:, :, self.T : 2 * self.T] = k
        vv[:, :, self.T : 2 * self.T] = v
        n = (2 + min(self.state.count + 1, self.W)) * self.T
        return self.attention(q, vk[:, :, :n], vv[:, :, :n])

    def _naive_window(self, layer: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Re-rotate and re-quantize every committed slot from the raw keys (the baseline's work)."""
        st = self.state
        assert st.raw_k is not None and st.raw_v is not None
        keys, values = [], []
        for slot in range(0, 1 + self.filled()):
            tok = self._tok(slot)
            cos, sin = self.tables(st.slot_pos[slot : slot + 1])
            kq, ks = quantize(rotate(st.raw_k[layer, :, tok], cos, sin))
            vq, vs = quantize(st.raw_v[layer, :, tok])
            keys.append(dequantize(kq, ks, self.dtype)[None])
            values.append(dequantize(vq, vs, self.dtype)[None])
        return keys, values

    def self_attend(self, _layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Attention of a chunk over itself only (the reference at prefill)."""
        return self.attention(q, k, v)

    # --- history ------------------------------------------------------------------------------
    def rollback(self, k: int) -> None:
        """Undo the last k commits. Raises RollbackError past the journal."""
        if k < 0:
            raise RollbackError(f"cannot roll back a negative number of chunks ({k})")
        if k > len(self.journal):
            raise RollbackError(
                f"cannot roll back {k} chunks: the journal holds the last {len(self.journal)} commits"
            )
        if k == 0:
            return
        for _ in range(k - 1):
            self.journal.pop()
        self.restore(self.journal.pop())

    def snapshot(self) -> CacheState:
        """A copy of the committed state (the journal is not included)."""
        return self.state.clone()

    def restore(self, snap: CacheState) -> None:
        """Return to a snapshot; the attention view is rebuilt from the int8 store. ``SnapshotError`` if the
        snapshot is of a cache of another shape or mode (another model's, say)."""
        own = self.state
        if (
            snap.k_q.shape != own.k_q.shape
            or snap.slot_pos.shape != own.slot_pos.shape
            or (snap.raw_k is None) != (own.raw_k is None)
        ):
            raise SnapshotError(
                f"the snapshot is of a cache of shape {tuple(snap.k_q.shape)} in "
                f"{'naive' if snap.raw_k is not None else 'write_time'} mode; this one is "
                f"{tuple(own.k_q.shape)} in {self.mode} mode"
            )
        self.state = snap.clone()
        if self.mode == "write_time":
            # Every slot, filled or not: the view then mirrors the store wholly, whatever a commit left
            # in a slot it was writing when it was abandoned (``abort_commit``).
            for slot in range(0, 1 + self.W):
                tok, view = self._tok(slot), self._view(slot)
                self.view_k[:, 0, :, view] = dequantize(
                    self.state.k_q[:, :, tok], self.state.k_s[:, :, tok], self.dtype
                )
                self.view_v[:, 0, :, view] = dequantize(
                    self.state.v_q[:, :, tok], self.state.v_s[:, :, tok], self.dtype
                )
