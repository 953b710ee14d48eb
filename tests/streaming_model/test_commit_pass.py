"""The commit pass stops once the last block has written its keys and values (``DiT.keys_values``): the
cache it fills is bit for bit the one the whole network's pass filled, chunk after chunk, through the
ring's wrap and the rebase of positions."""

from __future__ import annotations

import torch

from streaming_model.condition import ChunkCondition
from streaming_model.precision import computing
from streaming_model.runtime import Generator, Session
from tests.support.commit_pass import commit_whole


def committed(session: Session) -> list[torch.Tensor]:
    """The cache's committed contents: its int8 store and scales, the slots' positions, and the attention
    view but for the pending chunk's scratch region (an empty slot's position, NaN, as -1: NaN equals
    nothing)."""
    st, t = session.cache.state, session.cache.T
    views = [
        v[..., sl, :]
        for v in (session.cache.view_k, session.cache.view_v)
        for sl in (slice(0, t), slice(2 * t, None))
    ]
    return [st.k_q, st.k_s, st.v_q, st.v_s, torch.nan_to_num(st.slot_pos, nan=-1.0), *views]


def test_keys_values_are_those_of_the_whole_pass(tiny_generator: Generator) -> None:
    dit = tiny_generator.dit
    g = torch.Generator().manual_seed(3)
    z = torch.randn((1, 1, dit.cfg.latent_channels, dit.cfg.grid, dit.cfg.grid), generator=g)
    cos, sin = dit.rope_tables(torch.tensor([2.0], dtype=torch.float64))
    c = torch.randn((1, 1, dit.cfg.width), generator=g)

    def attend(_layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.scaled_dot_product_attention(q, k, v)

    with computing():
        _, whole = dit.run(z, c, cos, sin, attend)
        short = dit.keys_values(z, c, cos, sin, attend)
    assert len(short) == len(whole) == dit.cfg.depth
    for (k, v), (k0, v0) in zip(short, whole, strict=True):
        assert torch.equal(k, k0) and torch.equal(v, v0)


def test_the_cache_is_identical_whether_the_commit_pass_stops_early_or_runs_whole(
    tiny_generator: Generator,
) -> None:
    # Both commit in a pass of their own (``apart``), the pass this test is about.
    short = tiny_generator.open_session(identity=3, seed=4, commit_pass="apart")
    whole = tiny_generator.open_session(identity=3, seed=4, commit_pass="apart")
    commit_whole(whole)
    assert all(torch.equal(a, b) for a, b in zip(committed(short), committed(whole), strict=True))
    actions = ("wave", "walk_left", "nod", "jump", "idle", "walk_right", "sit")
    # Past the window (ring slots reused) and past max_distance (every ring key re-rotated).
    chunks = short.dit.cfg.max_distance + 4
    for i in range(chunks):
        cond = ChunkCondition(
            action=actions[i % len(actions)], speaking=i % 3 == 0, audio=(0.3, 0.8, 0.1, 0.5)
        )
        a, b = short.step(cond), whole.step(cond)
        assert (a == b).all(), f"chunk {i}: the frames differ"
        pairs = zip(committed(short), committed(whole), strict=True)
        assert all(torch.equal(x, y) for x, y in pairs), f"chunk {i}: the caches differ"
    assert short.cache.state.count == whole.cache.state.count == chunks
