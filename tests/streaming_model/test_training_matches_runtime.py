"""What the transformer is trained on is what the streaming runtime feeds it: a teacher-forced training
pass over a sequence predicts the same chunks as the cache-driven runtime given the same inputs."""

from __future__ import annotations

import torch

from streaming_model.dit import masked_attend
from streaming_model.kv_cache import KVCache
from streaming_model.runtime import Generator
from streaming_model.train.dit_batches import teacher_forcing_mask

SEQ = 6


def test_teacher_forcing_pass_equals_streaming_with_the_cache(tiny_generator: Generator) -> None:
    dit = tiny_generator.dit
    cfg = dit.cfg
    gen = torch.Generator().manual_seed(0)
    shape = (1, 1, cfg.latent_channels, cfg.grid, cfg.grid)
    ref = torch.randn(shape, generator=gen)
    clean = [torch.randn(shape, generator=gen) for _ in range(SEQ - 1)]
    noisy = [torch.randn(shape, generator=gen) for _ in range(SEQ)]
    action = torch.randint(cfg.n_actions, (1, SEQ), generator=gen)
    emotion = torch.randint(cfg.n_emotions, (1, SEQ), generator=gen)
    cont = torch.randn(1, SEQ, cfg.cont_dim, generator=gen)
    with torch.inference_mode():
        c_ctx = dit.embed_cond(action[:, :-1], emotion[:, :-1], cont[:, :-1], torch.full((1, SEQ - 1), 0.05))
        c_tgt = dit.embed_cond(action, emotion, cont, torch.full((1, SEQ), 1.0))
        c_ref = dit.reference_cond(1)

        # Training: one pass over [ref, clean..., noisy...], positions 0, 1.., 1..
        z = torch.cat([ref, *clean, *noisy], dim=1)
        c = torch.cat([c_ref, c_ctx, c_tgt], dim=1)
        pos = torch.tensor([0.0, *range(1, SEQ), *range(1, SEQ + 1)])
        cos, sin = dit.rope_tables(pos)
        mask = teacher_forcing_mask(cfg.window, SEQ, cfg.tokens)
        base = torch.cat([torch.zeros_like(z[:, :SEQ]), z[:, :SEQ]], dim=1)  # as dit_train builds it
        trained, _ = dit.run(z, c, cos, sin, masked_attend(mask), base=base)
        trained = trained[:, SEQ:]

        # Streaming: prefill the reference, then per chunk predict the noisy one and commit the clean one.
        cache = KVCache(
            cfg.depth,
            cfg.heads,
            cfg.head_dim,
            cfg.tokens,
            cfg.window,
            cfg.max_distance,
            dit.rope_tables,
            dit.rope.time_angles,
            dtype=torch.float32,
        )
        cos, sin = dit.rope_tables(torch.zeros(1))
        cache.prefill_sink(dit.run(ref, c_ref, cos, sin, cache.self_attend)[1])
        for j in range(SEQ):
            cos, sin = dit.rope_tables(torch.tensor([float(cache.next_position())]))
            prev = ref if j == 0 else clean[j - 1]  # the runtime's base: the chunk committed before
            pred, _ = dit.run(noisy[j], c_tgt[:, j : j + 1], cos, sin, cache.attend, base=prev)
            err = (pred[:, 0] - trained[:, j]).abs().max() / trained[:, j].abs().max()
            assert err < 0.005, f"chunk {j}: relative difference {err:.4f}"  # int8 cache rounding only
            if j < SEQ - 1:
                cache.commit(dit.run(clean[j], c_ctx[:, j : j + 1], cos, sin, cache.attend)[1])
