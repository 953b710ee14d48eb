"""The transformer's and the decoder's passes over one or more sessions (``runtime.Session``) at once:
generating their next chunks, committing chunks to their caches, decoding chunks to pixels.

A row of a batch reads only its own session's cache, seed and chunk index; the matrix products give each
row the bits they give it alone where the machine's kernels sum a row alike at any number of rows (bf16
on an EPYC with AVX512-BF16; not on a Xeon with AMX past 128 rows: tests/streaming_model/test_batched.py).

A committed chunk is *held* (``Session.held``) until the next generation: that generation's first pass
runs over the held chunk (at the context noise level) and the next chunk together, and in every layer
the held chunk's keys and values go into the cache before the next chunk attends there (``KVCache.
begin_commit``). What comes out is what a commit pass and then a generation give (bit for bit where the
kernels give a row the same bits at twice the rows: ``tiny.fusing_is_exact``), with the transformer's
matrix products made once over both chunks instead of twice over one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, get_args

import numpy as np
import torch

from .codec import Codec, to_uint8
from .condition import ChunkCondition, next_phase
from .dit import AttendFn
from .precision import computing
from .sampler import COMMIT_STEP, CONTEXT_T, renoise, seeded_noise

if TYPE_CHECKING:
    from .runtime import Session


CommitPass = Literal["fused", "apart"]
"""Where a committed chunk is written to its session's cache: in the pass that generates the next chunk
(``fused``), or in a pass of its own at commit (``apart``, the path before; kept to measure against)."""
COMMIT_PASSES: tuple[str, ...] = get_args(CommitPass)


def check_commit_pass(commit_pass: str) -> CommitPass:
    """``commit_pass`` as a ``CommitPass``; ``ValueError`` naming the choices for anything else."""
    if commit_pass == "fused":
        return "fused"
    if commit_pass == "apart":
        return "apart"
    raise ValueError(f"commit_pass must be one of {', '.join(COMMIT_PASSES)}, not {commit_pass[:40]!r}")


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


def _tables(sessions: Sequence[Session], chunks: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Each session's position tables for its next ``chunks`` chunks (from the position its cache gives
    the next), stacked as (B, 1, chunks*64, hd/2): one row per session, broadcast over the heads."""
    tables = [
        s.dit.rope_tables(torch.arange(chunks, dtype=torch.float64) + float(s.cache.next_position()))
        for s in sessions
    ]
    return torch.stack([cos for cos, _ in tables])[:, None], torch.stack([sin for _, sin in tables])[:, None]


def _attend_each(sessions: Sequence[Session], cancels: Sequence[threading.Event | None] = ()) -> AttendFn:
    """Attention of each batch row over its own session's cache (rows never see each other). With
    ``cancels``, ``Cancelled`` is raised before a block once every row's flag is set: an interrupt need
    not wait for a whole denoise step."""
    stop_if_cancelled = _cancel_check(len(sessions), cancels)

    def attend(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        stop_if_cancelled()
        if len(sessions) == 1:
            return sessions[0].cache.attend(layer, q, k, v)
        return torch.cat(
            [s.cache.attend(layer, q[i : i + 1], k[i : i + 1], v[i : i + 1]) for i, s in enumerate(sessions)]
        )

    return attend


def _cancel_check(rows: int, cancels: Sequence[threading.Event | None]) -> Callable[[], None]:
    """A check that raises ``Cancelled`` once every row's flag is set (a row without one never is)."""
    flags = [flag for flag in cancels if flag is not None]
    every = len(flags) == rows

    def check() -> None:
        if every and all(flag.is_set() for flag in flags):
            raise Cancelled

    return check


def _attend_settling(
    sessions: Sequence[Session],
    cancels: Sequence[threading.Event | None],
    kv: list[tuple[torch.Tensor, torch.Tensor]],
) -> AttendFn:
    """Attention of a pass over two chunks per row, the held one first: it attends as a commit pass
    does, then its keys and values of the layer (``kv``, unrotated, as the pass appends them) go into its
    session's cache, then the next chunk attends over the cache with it."""
    stop_if_cancelled = _cancel_check(len(sessions), cancels)
    held_attend = _attend_each(sessions)
    tokens = sessions[0].dit.cfg.tokens

    def attend(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        stop_if_cancelled()
        first = slice(0, tokens)
        # In the last block the held chunk's queries are not asked for: only its keys and values count.
        whole = q.shape[2] == k.shape[2]
        held = held_attend(layer, q[:, :, first], k[:, :, first], v[:, :, first]) if whole else None
        q = q[:, :, tokens:] if whole else q
        raw_k, raw_v = kv[layer]
        after = []
        for i, s in enumerate(sessions):
            s.cache.commit_layer(layer, raw_k[i : i + 1, :, first], raw_v[i : i + 1, :, first])
            rows = slice(i, i + 1)
            after.append(s.cache.attend_next(layer, q[rows], k[rows, :, tokens:], v[rows, :, tokens:]))
        return torch.cat(after) if held is None else torch.cat([held, torch.cat(after)], dim=2)

    return attend


def fuses(sessions: Sequence[Session]) -> bool:
    """Whether the sessions' held chunks can be committed in their next generation's first pass: each
    holds one, chose the fused pass, and its cache can take it layer by layer (no rebase due; the
    write-time path; a cache not damaged on purpose)."""
    return all(
        s.held is not None and s.commit_pass == "fused" and s.cache.layered() and not s.cache_noise
        for s in sessions
    )


def _contexts(
    sessions: Sequence[Session], pendings: Sequence[PendingChunk]
) -> tuple[torch.Tensor, torch.Tensor]:
    """The chunks as committed context (re-noised to the context level with their own seeded noise) and
    their conditions at that level: (B, 1, C, 16, 16), (B, 1, w)."""
    noise = torch.cat(
        [
            seeded_noise(s.seed, p.index, COMMIT_STEP, p.latent.shape)
            for s, p in zip(sessions, pendings, strict=True)
        ]
    )
    ctx = renoise(torch.cat([p.latent for p in pendings]), noise, CONTEXT_T)
    c = torch.cat(
        [
            s.condition_vector(p.condition, p.phase0, CONTEXT_T)
            for s, p in zip(sessions, pendings, strict=True)
        ]
    )
    return ctx, c


def _settling_step(
    sessions: Sequence[Session],
    cancels: Sequence[threading.Event | None],
    z: torch.Tensor,
    c: torch.Tensor,
) -> torch.Tensor:
    """A denoise step of the next chunks (``z`` at their noise level, under ``c``) that commits each
    session's held chunk in the same pass; their x0. ``Cancelled`` (every held chunk still held, the
    caches as before) when every row's flag is set before the pass ends."""
    held = [s.held for s in sessions]
    assert all(p is not None for p in held)
    pendings = [p for p in held if p is not None]
    ctx, c_ctx = _contexts(sessions, pendings)
    cos, sin = _tables(sessions, chunks=2)
    kv: list[tuple[torch.Tensor, torch.Tensor]] = []
    for s in sessions:
        s.cache.begin_commit()
    try:
        pred, _ = sessions[0].dit.run(
            torch.cat([ctx, z], dim=1),
            torch.cat([c_ctx, c], dim=1),
            cos,
            sin,
            _attend_settling(sessions, cancels, kv),
            kv=kv,
            predict_from=1,
        )
    except BaseException:
        for s in sessions:
            s.cache.abort_commit()
        raise
    for i, (s, pending) in enumerate(zip(sessions, pendings, strict=True)):
        s.cache.end_commit()
        s.took(pending, ctx[i : i + 1])
    return pred + ctx  # the next chunk's base is the held one as the model saw it


def generate_many(
    sessions: Sequence[Session],
    conds: Sequence[ChunkCondition],
    cancels: Sequence[threading.Event | None],
) -> list[PendingChunk | None]:
    """The next chunk of every session, each under its condition, denoised in one batched pass per step
    (``batchable`` sessions). Held chunks are committed first: in the first step's pass where every
    session ``fuses``, else in a commit pass of their own before it.

    A session whose ``cancel`` is set leaves the batch before the next denoise step and gets None; once
    every row's flag is set the pass stops between transformer blocks (a held chunk is then still held,
    unless its pass had ended). ``ConditionError`` for a malformed condition (then nothing is generated
    or committed)."""
    _check_batch(sessions, conds, cancels)
    for session, cond in zip(sessions, conds, strict=True):
        cond.validate(session.vocabulary)
    if not fuses(sessions):
        write_held([s for s in sessions if s.held is not None])
    first = sessions[0]
    phases = [next_phase(*s.last_condition(), c.action) for s, c in zip(sessions, conds, strict=True)]
    live = list(range(len(sessions)))
    x0 = torch.zeros((len(sessions), *first.latent_shape[1:]))  # pure noise at t = 1 whatever x0 is

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
                    x0 = x0[torch.tensor(keep, dtype=torch.long)]
                    live = [live[j] for j in keep]
                running = [sessions[i] for i in live]
                noise = torch.cat([seeded_noise(s.seed, s.index, step, s.latent_shape) for s in running])
                c = torch.cat([sessions[i].condition_vector(conds[i], phases[i], t) for i in live])
                z = renoise(x0, noise, t)
                if any(s.held is not None for s in running):  # the first step, fused: all of them hold
                    x0 = _settling_step(running, [cancels[i] for i in live], z, c)
                    continue
                cos, sin = _tables(running)
                base = torch.cat([s.base for s in running])
                x0, _ = first.dit.run(
                    z, c, cos, sin, _attend_each(running, [cancels[i] for i in live]), base=base
                )
    except Cancelled:
        return [None] * len(sessions)
    out: list[PendingChunk | None] = [None] * len(sessions)
    for row, i in enumerate(live):
        s, cond = sessions[i], conds[i]
        out[i] = PendingChunk(s.index, x0[row : row + 1], cond, phases[i], s.voice_tail + cond.voice)
    return out


def commit_many(sessions: Sequence[Session], pendings: Sequence[PendingChunk]) -> None:
    """Make each session's pending chunk part of it: held, for the next generation's pass to write to the
    cache (``commit_pass="fused"``), or written now in one batched commit pass (``apart``). A chunk still
    held from before is written first. ``ValueError`` (nothing committed) if a pending chunk does not
    follow its session."""
    _check_batch(sessions, pendings)
    for s, pending in zip(sessions, pendings, strict=True):
        if pending.index != s.index:
            raise ValueError(
                f"pending chunk {pending.index} does not follow the session (at chunk {s.index})"
            )
    for s in sessions:
        s.settle()
    for s, pending in zip(sessions, pendings, strict=True):
        s.hold(pending)
    write_held([s for s in sessions if s.commit_pass == "apart"])


def write_held(sessions: Sequence[Session]) -> None:
    """The sessions' held chunks into their caches: one batched pass at the context noise level, as far
    as the last block's keys and values, then each cache takes its row."""
    pendings = [s.held for s in sessions if s.held is not None]
    if not pendings:
        return
    assert len(pendings) == len(sessions), "a session without a held chunk"
    with computing():
        ctx, c = _contexts(sessions, pendings)
        # Only the keys and values are kept: each chunk's prediction is its pending latent already.
        kv = sessions[0].dit.keys_values(ctx, c, *_tables(sessions), _attend_each(sessions))
        for i, (s, pending) in enumerate(zip(sessions, pendings, strict=True)):
            s.take(pending, [(k[i : i + 1], v[i : i + 1]) for k, v in kv], ctx[i : i + 1])


def decode_many(codec: Codec, pendings: Sequence[PendingChunk]) -> list[np.ndarray]:
    """Pixels of chunks, decoded in one batch: (4, 128, 128, 3) uint8 each."""
    with computing():
        voice = torch.tensor([p.voice for p in pendings]) if pendings[0].voice else None
        px = codec.decode(torch.cat([p.latent[:, 0] for p in pendings]), voice)
    return [to_uint8(frames).numpy() for frames in px]
