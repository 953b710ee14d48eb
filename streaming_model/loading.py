"""Load the shipped default models from streaming_model/weights/."""

from __future__ import annotations

from pathlib import Path

from .codec import Codec, CodecConfig
from .dit import DiT, DiTConfig
from .weights import WEIGHTS_DIR, load_into, load_weights

CODEC_PATH = WEIGHTS_DIR / "codec.safetensors"
"""The codec as trained with its full decoder: the encoder every latent comes from, and the teacher of
the slim decoder."""
DIT_PATH = WEIGHTS_DIR / "dit.safetensors"
SLIM_CODEC_PATH = WEIGHTS_DIR / "codec_slim.safetensors"
"""The same encoder with a decoder a third cheaper (no per-frame residual block), taught to draw what the
full decoder draws (``codec_train --slim --teacher``), within its noise floor by ``onstage eval`` over 40
seeds."""

NAMED_WEIGHTS: dict[str, dict[str, Path]] = {
    "dit": {"shipped": DIT_PATH},
    "codec": {"slim": SLIM_CODEC_PATH, "full": CODEC_PATH},
}
"""The weights shipped in streaming_model/weights/, by kind and name, the default first."""

DEFAULT_WEIGHTS: dict[str, str] = {kind: next(iter(names)) for kind, names in NAMED_WEIGHTS.items()}
"""The name of the weights of each kind a session loads unless told otherwise."""
DEFAULT_CODEC_PATH = NAMED_WEIGHTS["codec"][DEFAULT_WEIGHTS["codec"]]
"""What sessions decode with unless told otherwise (the slim codec)."""


def weights_choices(kind: str) -> str:
    """What names weights of ``kind``: "slim or full or a weights file that exists"."""
    return f"{' or '.join(NAMED_WEIGHTS[kind])} or a weights file that exists"


def weights_file(kind: str, text: str) -> Path:
    """The ``kind`` ("dit" or "codec") of weights ``text`` names: shipped ones by name, or a file that
    exists; ``ValueError`` saying what would do otherwise."""
    names = NAMED_WEIGHTS[kind]
    if text in names:
        return names[text]
    if Path(text).is_file():
        return Path(text)
    raise ValueError(f"{weights_choices(kind)}, not {text[:80]!r}")


def load_codec(path: Path = CODEC_PATH) -> Codec:
    """The codec in eval mode (fp32 parameters; run it under bf16 autocast for speed); by default the
    full one, whose encoder the training scripts encode with."""
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
