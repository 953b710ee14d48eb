"""The transformer's training data as batches: shards of encoded episodes (``Shards``), sequences drawn
from them with their noise levels, teacher-forcing mask and loss weights (``Batcher``).

What a batch holds and how it is weighed is the recipe of ``dit_train`` (its module docstring).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from ..condition import ChunkCodes, continuous_features
from ..dit import DiTConfig, block_causal_mask
from ..manifest import ACTION_INDEX
from .dit_data import DATA_DIR, FIELDS

SEQ = 8  # chunks per training sequence
CHAR_WEIGHT = 4.0  # extra loss weight on tokens the character touches
FACE_WEIGHT = 8.0  # and more on eyes and mouth: a few pixels that carry gaze, emotion and lip sync
ONSET_WEIGHT = 3.0  # extra weight on an action's first 3 chunks: only there do its parameters show
ONSET_FRAMES = 12


class Shards:
    """All latent shards in memory; shard 0 is the validation set. ``plain``: a folder of shards of
    today's world trained on beside them (their scene: every part at its default), so that a transformer
    learning the scene keeps today's world in view."""

    def __init__(self, data_dir: Path = DATA_DIR, plain: Path | None = None) -> None:
        files = sorted(data_dir.glob("shard_*.npz"))
        if len(files) < 2:
            raise SystemExit(f"need at least 2 shards in {data_dir}; run streaming_model.train.dit_data")
        self.files = files
        self.reference = np.load(files[0])["reference"].astype(np.float32)
        self.val = _load(files[:1])
        extra = sorted(plain.glob("shard_*.npz")) if plain is not None else []
        self.train = _load(files[1:] + extra)


def _load(files: list[Path]) -> dict[str, np.ndarray]:
    """The shards' arrays joined along episodes; a shard without a scene gets the default one (zeros)
    where others have one."""
    parts = [dict(np.load(f)) for f in files]
    scene = next((p["scene"] for p in parts if "scene" in p), None)
    if scene is not None:
        for p in parts:
            p.setdefault("scene", np.zeros((*p["action"].shape, scene.shape[-1]), scene.dtype))
            p.setdefault("parts", np.zeros_like(p["masks"]))  # today's world shows neither lamp nor door
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0] if k != "reference"}


def scene_changes(data: dict[str, np.ndarray]) -> np.ndarray:
    """(episodes, chunks) bool: the chunks whose scene differs from the chunk before (none without one)."""
    changed = np.zeros(data["action"].shape, bool)
    if "scene" in data:
        changed[:, 1:] = (data["scene"][:, 1:] != data["scene"][:, :-1]).any(-1)
    return changed


def sample_levels(gen: torch.Generator, shape: tuple[int, ...]) -> torch.Tensor:
    """Target noise levels: 35% 1.0, 25% 0.5, 15% 0.75/0.25, 25% logit-normal skewed high."""
    u = torch.rand(shape, generator=gen)
    ln = torch.sigmoid(torch.randn(shape, generator=gen) * 1.0 + 0.4)
    pick = torch.where(torch.rand(shape, generator=gen) < 0.5, 0.75, 0.25)
    t = torch.where(u < 0.35, 1.0, torch.where(u < 0.6, 0.5, torch.where(u < 0.75, pick, ln)))
    return t.clamp(0.02, 1.0)


def teacher_forcing_mask(window: int, seq: int, tokens: int) -> torch.Tensor:
    """Mask over chunks [ref, clean 0..seq-2, noisy 0..seq-1]: each chunk sees the reference, the
    `window` clean chunks before it and itself; clean chunks are what the cache holds at inference."""
    attends = [[0]]
    for j in range(seq - 1):  # clean chunk j sits at index 1 + j
        attends.append([0, *range(max(1, 1 + j - window), 1 + j + 1)])
    for j in range(seq):  # noisy chunk j sits at index seq + j
        attends.append([0, *range(max(1, 1 + j - window), 1 + j), seq + j])
    return block_causal_mask(attends, tokens)


class Batcher:
    """Builds teacher-forcing batches: chunk list [ref, clean 0..T-2, noisy 0..T-1]."""

    def __init__(
        self,
        cfg: DiTConfig,
        data: dict[str, np.ndarray],
        reference: np.ndarray,
        focus: tuple[str, ...] = (),
        focus_prob: float = 0.0,
        change_prob: float = 0.0,
        change_weight: float = 0.0,
        part_weight: float = 0.0,
    ) -> None:
        self.cfg, self.d, self.ref = cfg, data, reference
        self.change_weight = change_weight
        if part_weight and "parts" not in data:
            raise ValueError(
                "a part weight needs shards with a scene's parts: rebuild them (dit_data --scene)"
            )
        self.part_weight = part_weight
        self.mask = teacher_forcing_mask(cfg.window, SEQ, cfg.tokens)
        # Onsets of the focus actions and, with a scene, its changes (a chunk whose context shows the old
        # scene must read the new one from its inputs), (episode, chunk), where a whole sequence fits with
        # the onset at a position that gets its loss. Each kind has its own share of the sequences: the
        # scene's changes, many more, once crowded out turn's onsets and the model forgot which way to turn.
        k = data["action"].shape[1]
        changed = scene_changes(data)
        self.after_change = np.zeros_like(changed)  # a change and the chunks of its first frames
        for back in range(ONSET_FRAMES // 4):
            self.after_change[:, back:] |= changed[:, : k - back]
        chunk = np.arange(k)[None]
        fits = (chunk >= cfg.window) & (chunk <= k - 2)
        wanted = np.isin(data["action"], [ACTION_INDEX[a] for a in focus]) & (data["phase0"] == 0)
        self.onsets = np.argwhere(wanted & fits)
        self.changes = np.argwhere(changed & fits)
        self.focus_prob = focus_prob if len(self.onsets) else 0.0
        self.change_prob = change_prob if len(self.changes) else 0.0

    def changed_tokens(self, ep: np.ndarray, start: np.ndarray, x0: torch.Tensor) -> torch.Tensor:
        """(b, SEQ, tokens) in [0, 1]: how far each token of the sequences' latents ``x0`` moved from the
        chunk before (a mean absolute change of 1, in normalised latent units, and more count fully). At a
        change of scene that is where a door, a lamp or the ball came or went: a few tokens of 64, which
        the loss otherwise weighs as any unchanged token of the sky."""
        chunks = np.maximum(start[:, None] + np.arange(SEQ) - 1, 0)
        before = torch.from_numpy(self.d["latents"][ep[:, None], chunks].astype(np.float32))
        return token_means((x0 - before).abs(), self.cfg.patch).clamp(max=1.0)

    def batch(self, gen: torch.Generator, b: int) -> dict[str, torch.Tensor]:
        """One batch of b sequences with noise, conditions, positions and loss weights: ``z`` (the model's
        chunks: reference, noised context, noisy targets), ``x0``, ``t``, ``t_ctx``, ``action``, ``emotion``,
        ``cont``, ``weight`` and ``pos``."""
        ep, start, episode_start = self._draw_sequences(gen, b)
        idx = (ep[:, None], start[:, None] + np.arange(SEQ))
        x0 = torch.from_numpy(self.d["latents"][idx].astype(np.float32))  # (b, SEQ, C, 16, 16)
        tok_w = self._token_weights(ep, start, idx, x0)
        scene = self.d["scene"][idx] if "scene" in self.d else None
        codes = ChunkCodes(**{f: self.d[f][idx] for f in FIELDS}, scene=scene)
        cont = torch.from_numpy(continuous_features(codes, scene=self.cfg.scene_dim > 0))
        action = torch.from_numpy(codes.action)
        emotion = torch.from_numpy(codes.emotion)
        ref = torch.from_numpy(self.ref[self.d["identity"][ep]])[:, None]
        t, noisy, t_ctx, ctx = self._noised(gen, b, x0)
        valid = self._target_weights(start, codes, idx)
        pos = self._positions(gen, episode_start)
        return {
            "z": torch.cat([ref, ctx, noisy], dim=1),
            "x0": x0,
            "t": t,
            "t_ctx": t_ctx,
            "action": action,
            "emotion": emotion,
            "cont": cont,
            "weight": tok_w * valid[..., None],
            "pos": pos,
        }

    def _draw_sequences(self, gen: torch.Generator, b: int) -> tuple[np.ndarray, np.ndarray, bool]:
        """The batch's sequences as (episodes, first chunks, whether they start their episodes: then every
        first chunk is 0), some of them placed around onsets."""
        e_count, k = self.d["latents"].shape[:2]
        ep = torch.randint(e_count, (b,), generator=gen).numpy()
        # A quarter of the batches start their episodes (the session start: reference pose, position 1).
        episode_start = torch.rand(1, generator=gen).item() < 0.25
        start = torch.randint(k - SEQ + 1, (b,), generator=gen).numpy() * (not episode_start)
        if not episode_start and (self.focus_prob or self.change_prob):
            ep, start = self._place_around_onsets(gen, b, k, ep, start)
        return ep, start, episode_start

    def _place_around_onsets(
        self, gen: torch.Generator, b: int, k: int, ep: np.ndarray, start: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """``ep`` and ``start`` (the b sequences' episodes, of ``k`` chunks, and first chunks) with each
        kind of onset's share of the sequences moved onto one of its onsets."""
        # Some sequences are placed around an onset of a focus action (an action the model is slow to
        # learn) or a change of scene, the onset somewhere in the part of the sequence that gets a loss.
        u = torch.rand(b, generator=gen).numpy()
        shares = ((self.onsets, 0.0, self.focus_prob), (self.changes, self.focus_prob, self.change_prob))
        for onsets, below, share in shares:
            if not share:
                continue
            focused = (u >= below) & (u < below + share)
            pick = onsets[torch.randint(len(onsets), (b,), generator=gen).numpy()]
            at = torch.randint(self.cfg.window, SEQ - 1, (b,), generator=gen).numpy()
            shifted = np.clip(pick[:, 1] - at, 0, k - SEQ)
            ep = np.where(focused, pick[:, 0], ep)
            start = np.where(focused, shifted, start)
        return ep, start

    def _token_weights(
        self, ep: np.ndarray, start: np.ndarray, idx: tuple[np.ndarray, np.ndarray], x0: torch.Tensor
    ) -> torch.Tensor:
        """(b, SEQ, tokens): each token's loss weight, up on the character, its face and (with their
        weights) the scene's parts and what a change of scene just moved."""
        tok_w = 1.0 + CHAR_WEIGHT * torch.from_numpy(self.d["masks"][idx].astype(np.float32))
        tok_w += FACE_WEIGHT * torch.from_numpy(self.d["faces"][idx].astype(np.float32))
        if self.part_weight:  # the lamp's and the door's tokens, wherever they show
            tok_w += self.part_weight * torch.from_numpy(self.d["parts"][idx].astype(np.float32))
        if self.change_weight:  # where the scene just changed, the tokens that changed most
            fresh = torch.from_numpy(self.after_change[idx]).float()[..., None]
            tok_w += self.change_weight * self.changed_tokens(ep, start, x0) * fresh
        return tok_w

    @staticmethod
    def _noised(
        gen: torch.Generator, b: int, x0: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(t, noisy, t_ctx, ctx): the targets ``x0`` noised to drawn levels ``t``, and the context (every
        chunk but the last) lightly noised (``t_ctx`` up to 0.2, 0 for 30% of the chunks)."""
        t = sample_levels(gen, (b, SEQ))
        noise = torch.randn(x0.shape, generator=gen)
        noisy = (1 - t)[..., None, None, None] * x0 + t[..., None, None, None] * noise
        t_ctx = torch.rand(b, SEQ - 1, generator=gen) * 0.2
        t_ctx = torch.where(torch.rand(b, SEQ - 1, generator=gen) < 0.3, 0.0, t_ctx)
        ctx = x0[:, :-1]
        ctx = (1 - t_ctx)[..., None, None, None] * ctx + t_ctx[..., None, None, None] * torch.randn(
            ctx.shape, generator=gen
        )
        return t, noisy, t_ctx, ctx

    def _target_weights(
        self, start: np.ndarray, codes: ChunkCodes, idx: tuple[np.ndarray, np.ndarray]
    ) -> torch.Tensor:
        """(b, SEQ): each target chunk's loss weight: 0 without its full history, up at onsets."""
        # A target sees its full history only from chunk `window` on, or when the sequence starts the
        # episode; earlier targets of mid-episode sequences have truncated context and get no loss.
        valid = (torch.arange(SEQ)[None] >= self.cfg.window) | torch.from_numpy(start == 0)[:, None]
        # Once an action runs, the context shows it and the next chunk mostly continues it; which paw
        # waves, where to look or which way to turn is decided in its first chunks. So with the scene:
        # once it shows, the context carries it.
        onset = torch.from_numpy((codes.phase0 < ONSET_FRAMES) | self.after_change[idx]).float()
        return valid * (1.0 + ONSET_WEIGHT * onset)

    def _positions(self, gen: torch.Generator, episode_start: bool) -> torch.Tensor:
        """(2 SEQ,) time positions of the chunks [ref, clean 0..SEQ-2, noisy 0..SEQ-1]: the reference at 0,
        chunk j at off + j (off 1 for sequences that start their episodes)."""
        # Past the episode's start, the distance to the reference is drawn over the trained range, as the
        # runtime's rebasing keeps it there.
        hi = self.cfg.max_distance - SEQ + 1
        off = 1 if episode_start else int(torch.randint(self.cfg.window + 1, hi + 1, (1,), generator=gen))
        return torch.cat([torch.zeros(1), off + torch.arange(SEQ - 1), off + torch.arange(SEQ)]).float()


def token_means(x: torch.Tensor, patch: int) -> torch.Tensor:
    """(b, SEQ, C, H, W) -> (b, SEQ, tokens): each token's mean over its channels and its patch."""
    b, n, c, h, w = x.shape
    return x.reshape(b, n, c, h // patch, patch, w // patch, patch).mean((2, 4, 6)).reshape(b, n, -1)
