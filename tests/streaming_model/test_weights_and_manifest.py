"""Weights files reject corruption and mismatch clearly; the manifest lists what the model can do."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
import torch

from streaming_model.codec import Codec, CodecConfig
from streaming_model.dit import DiTConfig
from streaming_model.loading import load_codec, load_dit
from streaming_model.manifest import ACTION_NAMES, EMOTIONS, Manifest, build_manifest, manifest_json
from streaming_model.weights import WEIGHTS_DIR, WeightsError, load_weights, save_weights

TINY = CodecConfig(c1=8, c2=16, c3=16, mix=32)


@pytest.fixture()
def codec_file(tmp_path: Path) -> Path:
    path = tmp_path / "codec.safetensors"
    save_weights(path, "codec", TINY, Codec(TINY).state_dict(), {"note": "test"})
    return path


def test_weights_round_trip(codec_file: Path) -> None:
    model = load_codec(codec_file)
    assert model.cfg == TINY


def test_a_flipped_byte_is_reported_as_corrupt(codec_file: Path) -> None:
    data = bytearray(codec_file.read_bytes())
    data[-100] ^= 0xFF  # inside the tensor data, past the header
    codec_file.write_bytes(bytes(data))
    with pytest.raises(WeightsError, match="corrupt"):
        load_codec(codec_file)


def test_a_truncated_file_is_reported_as_corrupt(codec_file: Path) -> None:
    codec_file.write_bytes(codec_file.read_bytes()[:500])
    with pytest.raises(WeightsError, match="corrupt"):
        load_codec(codec_file)


def test_weights_of_another_kind_are_rejected(codec_file: Path) -> None:
    with pytest.raises(WeightsError, match="holds 'codec' weights, expected 'dit'"):
        load_dit(codec_file)


def test_weights_for_another_shape_are_rejected(tmp_path: Path) -> None:
    path = tmp_path / "codec.safetensors"
    other = Codec(TINY).state_dict()
    other["decoder.mix.0.weight"] = torch.zeros(3, 3)
    save_weights(path, "codec", TINY, other, {})
    with pytest.raises(WeightsError, match=r"decoder.mix.0.weight has shape \(3, 3\)"):
        load_codec(path)


def test_a_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(WeightsError, match="not found"):
        load_weights(tmp_path / "nope.safetensors", "codec", CodecConfig)


def test_shipped_weights_fit_the_budget_and_load() -> None:
    files = list(WEIGHTS_DIR.glob("*.safetensors"))
    assert sum(f.stat().st_size for f in files) <= 25 * 1024 * 1024
    if (WEIGHTS_DIR / "dit.safetensors").exists():
        dit, info = load_dit()
        assert isinstance(dit.cfg, DiTConfig) and "steps" in info
    if (WEIGHTS_DIR / "codec.safetensors").exists():
        assert isinstance(load_codec().cfg, CodecConfig)


def test_manifest_is_json_and_lists_actions_and_emotions() -> None:
    m = msgspec.json.decode(manifest_json(), type=Manifest)
    assert m == build_manifest()
    assert tuple(a.name for a in m.actions) == ACTION_NAMES
    assert m.emotions == EMOTIONS
    look = next(a for a in m.actions if a.name == "look_at")
    assert [p.name for p in look.params] == ["target_x", "target_y"]
    wave = next(a for a in m.actions if a.name == "wave")
    assert wave.params[0].choices == ("left", "right")


def test_the_manifest_states_its_clock_and_picture_and_can_be_built_at_another() -> None:
    default = build_manifest()
    assert (default.fps, default.frames_per_chunk, default.width, default.height) == (24, 4, 128, 128)
    assert default.chunk_s == 4 / 24 and default.frame_s == 1 / 24
    other = build_manifest(fps=16, frames_per_chunk=12, width=160, height=96)
    assert (other.chunk_s, other.width, other.height) == (0.75, 160, 96)
    assert other.actions == default.actions and "12 values" in other.audio_envelope
