"""What the codec's decoder is taught from: with the scene, worlds whose scene changes, each chunk beside the
same chunk rendered silent (the voice's lesson) under the same scene."""

from __future__ import annotations

import numpy as np

from streaming_model.scene_probes import measure_scene
from streaming_model.train.codec_data import voiced_chunks


def test_scene_chunks_show_a_changing_scene_and_their_silent_copies_differ_only_at_the_mouth() -> None:
    frames, silent, voice = voiced_chunks(3, 4, 24, 3, scene=True)
    plain, _, _ = voiced_chunks(3, 4, 24, 3)
    assert frames.shape == silent.shape == plain.shape and voice.shape == (4 * 24, 3 - 1 + 4)
    scene = measure_scene(frames.reshape(-1, *frames.shape[2:]).numpy())
    assert scene.light.std(0).max() > 0.1 and (scene.door_shown.any() or scene.ball_shown.any())
    differ = (frames != silent).any(-1).reshape(-1, 128, 128).numpy()
    assert differ.any()  # the voice opens the mouth in one and not the other
    for frame in differ[differ.any((1, 2))]:
        rows, cols = np.nonzero(frame)
        assert rows.max() - rows.min() < 16 and cols.max() - cols.min() < 24  # a mouth, not the scene
    assert not np.array_equal(frames.numpy(), plain.numpy())
