"""The causal diffusion transformer over latent chunks.

Each 16x16xC latent chunk is patchified 2x2 into 64 tokens. Attention is bidirectional within a chunk
and causal across chunks; a chunk sees the pinned reference chunk (identity) and a sliding window of
recent chunks. Positions are fixed 3D rotary (time, row, column). Conditioning (action, emotion, the
continuous features, the noise level) enters every block through adaLN, per chunk.

Attention is split so a streaming runtime can keep keys already rotated: a block *projects* q, k, v;
the caller rotates q and k for explicit positions; an `attend(layer, q, k, v)` callback does the rest
(a KV cache or, in training, a masked full-sequence attention).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import cast

import msgspec
import torch
from torch import nn
from torch.nn import functional as F

from .condition import CONT_DIM, SCENE_DIM
from .manifest import ACTION_INDEX, ACTION_NAMES, EMOTIONS
from .rope import Rope, cos_sin, rotate

AttendFn = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
CHUNK_ROWS = 8
"""Per-chunk conditions go through their layers at least this many rows at a time (``per_chunk``): twice
the count from which one AVX2-only CPU's fp32 kernels gave every row the same result (4, for 4 to 200
rows tried), few enough that the padding costs little."""


def per_chunk(layer: Callable[[torch.Tensor], torch.Tensor], c: torch.Tensor) -> torch.Tensor:
    """``layer`` on per-chunk conditions ``c`` (..., w), one row per chunk, computed in a batch of at least
    ``CHUNK_ROWS`` rows (zeros fill it). A BLAS takes other kernels for a matrix of one to three rows than
    for more, with other rounding in fp32 (seen on an AVX2-only CPU), so a chunk's condition would come out
    differently alone, beside another session's in a batch, or beside the next chunk's in a fused pass;
    the same kernel for every count keeps a session's frames byte-identical across them."""
    rows = c.numel() // c.shape[-1]
    if rows >= CHUNK_ROWS:
        return layer(c)
    flat = c.reshape(rows, c.shape[-1])
    out = layer(torch.cat([flat, flat.new_zeros(CHUNK_ROWS - rows, flat.shape[-1])]))[:rows]
    return out.reshape(*c.shape[:-1], out.shape[-1])


class DiTConfig(msgspec.Struct, frozen=True):
    """Shape of the transformer; stored in the weights header so a loader can check it."""

    latent_channels: int = 16
    grid: int = 16
    patch: int = 2
    width: int = 256
    depth: int = 6
    heads: int = 4
    mlp_ratio: int = 4
    window: int = 3  # recent chunks a chunk attends to, besides the reference
    max_distance: int = 40  # largest trained time distance between a chunk and the reference
    rope_dims: tuple[int, int, int] = (16, 24, 24)
    rope_bases: tuple[float, float, float] = (100.0, 16.0, 16.0)
    n_actions: int = len(ACTION_NAMES)
    n_emotions: int = len(EMOTIONS)
    cont_dim: int = CONT_DIM
    scene_dim: int = 0
    """The last ``scene_dim`` continuous inputs are the scene's (``condition.scene_features``); 0: a model
    that draws no scene (the shipped weights)."""
    cond_maps: int = 0
    """How many spatial maps the chunk's condition weighs into its tokens (``DiT.maps``); 0: none (the
    shipped weights)."""

    @property
    def tokens(self) -> int:
        """Tokens per chunk."""
        return (self.grid // self.patch) ** 2

    @property
    def head_dim(self) -> int:
        """Width of one attention head."""
        return self.width // self.heads


class Block(nn.Module):
    """adaLN-Zero transformer block with QK-norm; attention itself is delegated to a callback."""

    def __init__(self, cfg: DiTConfig) -> None:
        super().__init__()
        w, self.heads, self.hd = cfg.width, cfg.heads, cfg.head_dim
        self.norm1 = nn.LayerNorm(w, elementwise_affine=False, eps=1e-6)
        self.qkv = nn.Linear(w, 3 * w)
        self.q_norm = nn.RMSNorm(self.hd, eps=1e-6)
        self.k_norm = nn.RMSNorm(self.hd, eps=1e-6)
        self.proj = nn.Linear(w, w)
        self.norm2 = nn.LayerNorm(w, elementwise_affine=False, eps=1e-6)
        self.mlp = nn.Sequential(
            nn.Linear(w, cfg.mlp_ratio * w), nn.GELU("tanh"), nn.Linear(cfg.mlp_ratio * w, w)
        )
        self.ada = nn.Linear(w, 6 * w)
        nn.init.zeros_(self.ada.weight)
        nn.init.zeros_(self.ada.bias)

    def modulation(self, c: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Six (B, nC, 1, w) modulation tensors from per-chunk conditions c (B, nC, w)."""
        return tuple(m.unsqueeze(2) for m in per_chunk(self.ada, F.silu(c)).chunk(6, dim=-1))

    def project(self, x: torch.Tensor, mod: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        """x (B, nC, T, w) -> q, k, v (B, H, nC*T, hd), q and k normalised but not yet rotated."""
        shift, scale = mod[0], mod[1]
        h = self.norm1(x) * (1 + scale) + shift
        b = x.shape[0]
        qkv = self.qkv(h).reshape(b, -1, 3, self.heads, self.hd).permute(2, 0, 3, 1, 4)
        # Norms in float32: keys are cached, and the fused RMSNorm wants matching dtypes.
        return self.q_norm(qkv[0].float()), self.k_norm(qkv[1].float()), qkv[2]

    def finish(self, x: torch.Tensor, o: torch.Tensor, mod: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """Residual attention output o (B, H, L, hd) and the MLP."""
        b, nc, t, w = x.shape
        o = o.transpose(1, 2).reshape(b, nc, t, w)
        x = x + mod[2] * self.proj(o)
        h = self.norm2(x) * (1 + mod[4]) + mod[3]
        return x + mod[5] * self.mlp(h)


def timestep_features(t: torch.Tensor, dim: int = 128) -> torch.Tensor:
    """Sinusoidal features of the noise level t in [0, 1]."""
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    ang = (t.float() * 1000.0)[..., None] * freqs
    return torch.cat([ang.sin(), ang.cos()], dim=-1)


class DiT(nn.Module):
    """x0-predicting diffusion transformer over latent chunks."""

    _rows: torch.Tensor  # registered buffers: the token grid's row and column of each patch
    _cols: torch.Tensor

    def __init__(self, cfg: DiTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        w = cfg.width
        pdim = cfg.patch * cfg.patch * cfg.latent_channels
        self.patch_in = nn.Linear(pdim, w)
        self.action_emb = nn.Embedding(cfg.n_actions + 1, w)  # the last entry marks the reference chunk
        self.emotion_emb = nn.Embedding(cfg.n_emotions, w)
        self.cont_mlp = nn.Sequential(nn.Linear(cfg.cont_dim, w), nn.SiLU(), nn.Linear(w, w))
        self.t_mlp = nn.Sequential(nn.Linear(128, w), nn.SiLU(), nn.Linear(w, w))
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.depth))
        self.norm_out = nn.LayerNorm(w, elementwise_affine=False, eps=1e-6)
        self.ada_out = nn.Linear(w, 2 * w)
        self.patch_out = nn.Linear(w, pdim)
        for lin in (self.ada_out, self.patch_out):
            nn.init.zeros_(lin.weight)
            nn.init.zeros_(lin.bias)
        if cfg.cond_maps:
            # A path from the condition to places in the picture: a door at the right edge or a lamp at the
            # left is one map, where adaLN's per-chunk modulation must find the place through the
            # tokens' contents (a transformer trained 3,700 steps that way drew the light but no door).
            self.map_weights = nn.Linear(w, cfg.cond_maps)
            self.maps = nn.Parameter(torch.zeros(cfg.cond_maps, cfg.tokens, w))
        self.rope = Rope(cfg.head_dim, cfg.rope_dims, cfg.rope_bases)
        g = cfg.grid // cfg.patch
        rows, cols = torch.meshgrid(torch.arange(g), torch.arange(g), indexing="ij")
        self.register_buffer("_rows", rows.reshape(-1), persistent=False)
        self.register_buffer("_cols", cols.reshape(-1), persistent=False)

    # --- conditions and positions -------------------------------------------------------------
    def embed_cond(
        self, action: torch.Tensor, emotion: torch.Tensor, cont: torch.Tensor, t: torch.Tensor
    ) -> torch.Tensor:
        """Per-chunk condition vectors (B, nC, w). action == n_actions marks the reference chunk."""
        c = self.action_emb(action) + self.emotion_emb(emotion) + per_chunk(self.cont_mlp, cont)
        return c + per_chunk(self.t_mlp, timestep_features(t))

    def reference_cond(self, batch: int) -> torch.Tensor:
        """Condition of the pinned reference chunk (clean, no action)."""
        dev = self._rows.device
        a = torch.full((batch, 1), self.cfg.n_actions, dtype=torch.long, device=dev)
        e = torch.zeros((batch, 1), dtype=torch.long, device=dev)
        cont = torch.zeros(batch, 1, self.cfg.cont_dim, device=dev)
        return self.embed_cond(a, e, cont, torch.zeros(batch, 1, device=dev))

    def rope_tables(self, time_pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin (nC*T, hd/2) for chunks at the given time positions (nC,)."""
        n = self.cfg.tokens
        t = time_pos.to(self._rows.device).double().repeat_interleave(n)
        h = self._rows.repeat(len(time_pos))
        w = self._cols.repeat(len(time_pos))
        return cos_sin(self.rope.angles(t, h, w))

    # --- latents <-> tokens -------------------------------------------------------------------
    def patchify(self, z: torch.Tensor) -> torch.Tensor:
        """(B, nC, C, 16, 16) -> (B, nC, 64, p*p*C)."""
        b, nc, c, hh, ww = z.shape
        p = self.cfg.patch
        z = z.reshape(b, nc, c, hh // p, p, ww // p, p).permute(0, 1, 3, 5, 4, 6, 2)
        return z.reshape(b, nc, (hh // p) * (ww // p), p * p * c)

    def unpatchify(self, x: torch.Tensor) -> torch.Tensor:
        """(B, nC, 64, p*p*C) -> (B, nC, C, 16, 16)."""
        b, nc = x.shape[:2]
        p, c, g = self.cfg.patch, self.cfg.latent_channels, self.cfg.grid // self.cfg.patch
        x = x.reshape(b, nc, g, g, p, p, c).permute(0, 1, 6, 2, 4, 3, 5)
        return x.reshape(b, nc, c, g * p, g * p)

    # --- the network --------------------------------------------------------------------------
    def run(
        self,
        z: torch.Tensor,
        c: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        attend: AttendFn,
        base: torch.Tensor | None = None,
        kv: list[tuple[torch.Tensor, torch.Tensor]] | None = None,
        predict_from: int = 0,
    ) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
        """Run chunks z (B, nC, C, 16, 16) with conditions c (B, nC, w) and rope tables for their tokens.

        base: the previous chunk as the model saw it (the reference for the first chunk); the network
        predicts x0 as base + a change, so that from the first step on it only has to learn what moves
        (most of a chunk is the chunk before it).
        Returns the x0 prediction (B, nC, C, 16, 16) and, per layer, the normalised keys *before*
        rotation and the values (B, H, nC*64, hd): a cache rotates those keys for the positions it
        owns when the chunk is committed. They are appended to ``kv`` where one is given, each before its
        layer's ``attend``: an attention that writes a chunk to the cache as the pass goes reads them there.

        predict_from: the first chunk whose prediction is wanted. The chunks before it run only as far as
        their last keys and values (as ``keys_values``): the last block's ``attend`` is then given the
        queries of the predicted chunks alone, and the prediction (and ``base``) covers those chunks.
        """
        kv = [] if kv is None else kv
        x = self._blocks(z, c, cos, sin, attend, kv, finish_from=predict_from)
        assert x is not None
        c = c[:, predict_from:]
        shift, scale = (m.unsqueeze(2) for m in per_chunk(self.ada_out, F.silu(c)).chunk(2, dim=-1))
        out = self.patch_out(self.norm_out(x) * (1 + scale) + shift)
        pred = self.unpatchify(out.float())
        return (pred if base is None else pred + base), kv

    def keys_values(
        self, z: torch.Tensor, c: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, attend: AttendFn
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per layer, the keys (normalised, not rotated) and values ``run`` gives for the same inputs, bit
        for bit, without what only the prediction needs: the last block's attention and MLP and the output
        head. A cache's commit pass wants nothing else (the chunk's own prediction is already known)."""
        kv: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._blocks(z, c, cos, sin, attend, kv, finish_from=None)
        return kv

    def _blocks(
        self,
        z: torch.Tensor,
        c: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        attend: AttendFn,
        kv: list[tuple[torch.Tensor, torch.Tensor]],
        finish_from: int | None,
    ) -> torch.Tensor | None:
        """The blocks over patchified z, appending each block's keys and values to kv; the last block's
        output for the chunks from ``finish_from`` on (B, nC - finish_from, T, w), or None when it is None:
        the last block stops once it has projected."""
        x = self.patch_in(self.patchify(z))
        if self.cfg.cond_maps:
            x = x + torch.einsum("bcm,mtw->bctw", per_chunk(self.map_weights, F.silu(c)), self.maps)
        # To mypy a ModuleList yields plain Modules; these are the Blocks built in __init__.
        blocks = cast("list[Block]", list(self.blocks))
        for i, blk in enumerate(blocks):
            mod = blk.modulation(c)
            q, k, v = blk.project(x, mod)
            kv.append((k, v))
            if i == len(blocks) - 1:
                if finish_from is None:
                    return None
                # Only the predicted chunks go on: their queries, rows and modulation.
                first = finish_from * self.cfg.tokens
                q, cos_q, sin_q = q[:, :, first:], cos[..., first:, :], sin[..., first:, :]
                x, mod = x[:, finish_from:], tuple(m[:, finish_from:] for m in mod)
            else:
                cos_q, sin_q = cos, sin
            q = rotate(q, cos_q, sin_q).to(v.dtype)
            k = rotate(k, cos, sin).to(v.dtype)
            x = blk.finish(x, attend(i, q, k, v), mod)
        return x


def block_causal_mask(attends: list[list[int]], tokens: int) -> torch.Tensor:
    """Boolean (nC*T, nC*T) mask from, per chunk, the chunk indices it may attend to (itself included)."""
    nc = len(attends)
    chunk_mask = torch.zeros(nc, nc, dtype=torch.bool)
    for i, srcs in enumerate(attends):
        chunk_mask[i, srcs] = True
    return chunk_mask.repeat_interleave(tokens, 0).repeat_interleave(tokens, 1)


def masked_attend(mask: torch.Tensor) -> AttendFn:
    """Training attention: every token against every token under a boolean mask."""

    def attend(_layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    return attend


def with_scene(dit: DiT) -> DiT:
    """``dit`` grown to read the scene and its actions, computing exactly what it did for today's world.

    The actions toward the scene take new embedding rows (copies of ``idle``'s: they start as standing
    still), between the trained actions and the reference marker, which moves to the end; the scene's
    inputs take new columns of the condition MLP's first layer, at zero; condition maps are added
    (``with_maps``). Where to start training a model that draws the scene from the shipped weights
    (``train.dit_train --scene``).
    """
    old = dit.cfg
    if old.scene_dim:
        raise ValueError("this transformer reads the scene already")
    cfg = msgspec.structs.replace(
        old, n_actions=len(ACTION_INDEX), cont_dim=old.cont_dim + SCENE_DIM, scene_dim=SCENE_DIM
    )
    grown = DiT(cfg)
    state = dict(dit.state_dict())
    emb = state["action_emb.weight"]  # (n_actions + 1, w): the last row marks the reference chunk
    new_rows = emb[ACTION_INDEX["idle"]].expand(cfg.n_actions - old.n_actions, -1)
    state["action_emb.weight"] = torch.cat([emb[: old.n_actions], new_rows, emb[old.n_actions :]])
    first = state["cont_mlp.0.weight"]  # (w, cont_dim)
    state["cont_mlp.0.weight"] = torch.cat([first, first.new_zeros(first.shape[0], SCENE_DIM)], dim=1)
    grown.load_state_dict(state)
    return with_maps(grown)


MAP_RANK = 16
"""The condition maps a model grown to draw the scene gets."""


def with_maps(dit: DiT, rank: int = MAP_RANK) -> DiT:
    """``dit`` with ``rank`` condition maps, computing exactly what it did: the maps start at zero (their
    weights from the condition at random, so that the maps learn from the first step)."""
    if dit.cfg.cond_maps:
        raise ValueError("this transformer has condition maps already")
    grown = DiT(msgspec.structs.replace(dit.cfg, cond_maps=rank)).to(next(dit.parameters()).device)
    missing, unexpected = grown.load_state_dict(dit.state_dict(), strict=False)
    assert sorted(missing) == ["map_weights.bias", "map_weights.weight", "maps"] and not unexpected
    return grown


def grown_for_scene(dit: DiT) -> DiT:
    """``dit`` grown as far as a model that draws the scene needs: the scene's inputs and actions
    (``with_scene``), condition maps (``with_maps``); as it is where it has both."""
    if not dit.cfg.scene_dim:
        return with_scene(dit)
    return dit if dit.cfg.cond_maps else with_maps(dit)
