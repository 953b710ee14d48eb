"""Per-chunk conditions come out of the transformer's layers the same, bit for bit, however many chunks
go through them together (a session alone, in a batch of sessions, or with the next chunk in a fused pass)."""

from __future__ import annotations

import pytest
import torch

from streaming_model.dit import CHUNK_ROWS, Block, DiT, per_chunk
from streaming_model.loading import load_dit


def _first_block(model: DiT) -> Block:
    block = model.blocks[0]
    assert isinstance(block, Block)
    return block


@pytest.mark.parametrize("rows", [2, 3, CHUNK_ROWS + 5])
def test_a_chunks_condition_is_the_same_alone_and_beside_others(rows: int) -> None:
    model = load_dit()[0]
    gen = torch.Generator().manual_seed(rows)
    for layer, width in (
        (_first_block(model).ada, model.cfg.width),
        (model.t_mlp, 128),
        (model.ada_out, model.cfg.width),
    ):
        c = torch.randn(1, rows, width, generator=gen)
        alone = per_chunk(layer, c[:, :1])
        together = per_chunk(layer, c)
        assert alone.shape == (1, 1, together.shape[-1]) and together.shape[:2] == (1, rows)
        assert torch.equal(alone[0, 0], together[0, 0])


def test_padding_rows_changes_no_result_of_a_layer_with_enough_rows() -> None:
    layer = _first_block(load_dit()[0]).ada
    c = torch.randn(CHUNK_ROWS, layer.in_features, generator=torch.Generator().manual_seed(0))
    assert torch.equal(per_chunk(layer, c), layer(c))
