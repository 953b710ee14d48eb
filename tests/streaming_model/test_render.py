"""`render` writes an animated file of a scripted action sequence."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import GifImagePlugin, Image, ImageSequence, WebPImagePlugin

import streaming_model.render as r
from streaming_model.condition import ConditionError
from streaming_model.render import Beat, conditions, render
from streaming_model.scene_probes import expected_light, measure_scene, weather_shown


def test_render_writes_an_animated_gif_with_one_frame_per_video_frame(tmp_path: Path) -> None:
    beats = [Beat("wave", 0.5, speaking=True), Beat("jump", 0.5)]
    out = render(beats, tmp_path / "demo.gif", source="world", scale=1)
    with Image.open(out) as im:
        assert isinstance(im, GifImagePlugin.GifImageFile)
        assert im.is_animated and im.n_frames == 24  # 2 x 0.5 s at 24 fps
        assert im.size == (128, 128)


def test_render_side_by_side_webp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The model half is tested in the runtime tests; here only the layout: truth left, model right.
    monkeypatch.setattr(
        r,
        "model_frames",
        lambda conds, identity, seed, steps: np.zeros((4 * len(conds), 128, 128, 3), np.uint8),
    )
    out = render([Beat("nod", 0.5)], tmp_path / "demo.webp", source="both", scale=1)
    with Image.open(out) as im:
        assert isinstance(im, WebPImagePlugin.WebPImageFile)
        assert im.size == (256, 128) and im.n_frames == 12


def test_a_script_with_an_unknown_action_is_rejected() -> None:
    with pytest.raises(ConditionError, match="unknown action"):
        conditions([Beat("fly")])


def test_the_scene_tour_shows_its_changes_and_the_shipped_model_refuses_it(tmp_path: Path) -> None:
    out = render(r.SCENE_DEMO, tmp_path / "tour.gif", source="world", scale=1)
    with Image.open(out) as im:
        frames = [np.asarray(f.convert("RGB")) for f in ImageSequence.Iterator(im)]
    seen = measure_scene(np.stack(frames))
    assert seen.ball_shown[30] and seen.door_shown[30] and not seen.door_shown[0]  # the door rises in
    assert (np.abs(seen.light - expected_light("night", "on")) < 0.08).all(-1).any()  # a night under the lamp
    assert (weather_shown(seen) == 1).any() and (weather_shown(seen) == 2).any()  # rain, then snow
    assert (seen.door_open > 0.9).any()  # the door opened
    with pytest.raises(ConditionError, match="this model draws no scene"):
        render(r.SCENE_DEMO, tmp_path / "model.gif", source="model")
