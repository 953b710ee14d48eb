"""Load the shipped default models from streaming_model/weights/."""

from __future__ import annotations

from pathlib import Path

from .codec import Codec, CodecConfig
from .dit import DiT, DiTConfig
from .weights import WEIGHTS_DIR, load_into, load_weights

CODEC_PATH = WEIGHTS_DIR / "codec.safetensors"
DIT_PATH = WEIGHTS_DIR / "dit.safetensors"


def load_codec(path: Path = CODEC_PATH) -> Codec:
    """The codec in eval mode (fp32 parameters; run it under bf16 autocast for speed)."""
    cfg, tensors, _ = load_weights(path, "codec", CodecConfig)
    model = Codec(cfg)
    load_into(model, tensors, path)
    return model.eval()


def load_dit(path: Path = DIT_PATH) -> tuple[DiT, dict]:
    """The transformer in eval mode and the training info stored with it."""
    cfg, tensors, info = load_weights(path, "dit", DiTConfig)
    model = DiT(cfg)
    load_into(model, tensors, path)
    return model.eval(), info
