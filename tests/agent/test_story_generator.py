"""Rewind continues the picture: the story's checkpoints carry the streaming runtime's snapshot, so the
first chunk after a rewind equals, byte for byte, the chunk first generated after that checkpoint.

The runtime runs tiny randomly initialised models here: snapshot and restore do not depend on training,
and small models keep the test fast on two cores.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from agent.realizer import Realizer
from agent.story.format import load_story
from agent.story.player import StoryPlayer
from agent.story.store import CheckpointStore
from streaming_model.codec import Codec, CodecConfig
from streaming_model.dit import DiT, DiTConfig
from streaming_model.runtime import Generator, Session, SessionSnapshot


@pytest.fixture(scope="module")
def generator() -> Generator:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    dit = DiT(DiTConfig(width=64, depth=2, heads=2, rope_dims=(8, 12, 12), max_distance=12))
    noise = torch.Generator().manual_seed(1)
    for p in dit.parameters():  # adaLN-Zero starts at zero; without weights every frame would be the same
        if not p.detach().abs().sum():
            p.data = torch.randn(p.shape, generator=noise) * 0.05
    return Generator(dit, Codec(CodecConfig(c1=8, c2=16, c3=16, mix=32)))


def play(realizer: Realizer, session: Session, count: int) -> list[bytes]:
    """Tick the realizer and generate each chunk from its condition, as the session conductor does."""
    frames = []
    for _ in range(count):
        out = realizer.tick(realizer.chunk + 1)
        frames.append(np.ascontiguousarray(session.step(out.condition)).tobytes())
    return frames


async def test_after_a_rewind_the_first_chunk_is_the_one_first_generated_there(
    generator: Generator, tmp_path: Path
) -> None:
    session = generator.open_session(identity=1, seed=5)
    realizer = Realizer(session="s1")
    store = CheckpointStore(tmp_path / "stories.db")
    player = await StoryPlayer.begin(
        load_story("garden_gate"), realizer, session="s1", store=store, capture=session.snapshot
    )
    play(realizer, session, 3)
    await player.choose("wave")  # c2: the realizer at chunk 2, the generator after committing it
    first = play(realizer, session, 3)
    await player.choose("leave")
    later = play(realizer, session, 2)

    restored = await player.rewind("c2")
    assert isinstance(restored.generator, SessionSnapshot)
    session.restore(restored.generator)
    assert session.index == restored.chunk + 1
    again = play(realizer, session, 3)
    assert again == first
    assert again[0] != later[0]

    # A restarted server: a new realizer and a new generator session continue from the SQLite file.
    await store.close()
    reopened = CheckpointStore(tmp_path / "stories.db")
    fresh_session = generator.open_session(identity=1, seed=5)
    fresh = Realizer(session="s1")
    _, resumed = await StoryPlayer.resume(reopened, fresh, session="s1", capture=fresh_session.snapshot)
    assert isinstance(resumed.generator, SessionSnapshot)
    fresh_session.restore(resumed.generator)
    assert resumed.view.checkpoint == "c2"
    assert play(fresh, fresh_session, 3) == first
    await reopened.close()
