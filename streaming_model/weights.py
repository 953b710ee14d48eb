"""Shipped weights: safetensors files with a JSON header that lets a loader reject corrupt or
mismatched files with a clear message instead of a shape error deep inside torch."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import msgspec
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file

FORMAT_VERSION = 1
WEIGHTS_DIR = Path(__file__).parent / "weights"


class WeightsError(RuntimeError):
    """A weights file that is missing, corrupt, or does not match what the loader expects."""


def _digest(tensors: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        h.update(name.encode())
        h.update(str(tuple(t.shape)).encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def save_weights(
    path: Path, kind: str, config: msgspec.Struct, tensors: dict[str, torch.Tensor], info: dict[str, Any]
) -> None:
    """Write tensors (stored as given) with a header naming kind, config, a checksum and free-form info."""
    tensors = {k: v.detach().contiguous().cpu() for k, v in tensors.items()}
    header = {
        "format_version": FORMAT_VERSION,
        "kind": kind,
        "config": msgspec.to_builtins(config),
        "sha256": _digest(tensors),
        "info": info,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    save_file(tensors, str(tmp), metadata={"onstage": json.dumps(header)})
    tmp.replace(path)


def load_weights(path: Path, kind: str, config_type: type[Any]) -> tuple[Any, dict[str, torch.Tensor], dict]:
    """Load and check a weights file; returns (config, tensors, info). Raises WeightsError."""
    if not path.exists():
        raise WeightsError(f"weights file not found: {path}")
    try:
        tensors = load_file(str(path))

        with safe_open(str(path), "pt") as fh:
            meta = fh.metadata() or {}
    except (SafetensorError, OSError, ValueError) as exc:
        raise WeightsError(f"weights file {path} is corrupt or not safetensors: {exc}") from exc
    if "onstage" not in meta:
        raise WeightsError(f"weights file {path} has no onstage header")
    header = json.loads(meta["onstage"])
    if header.get("format_version") != FORMAT_VERSION:
        raise WeightsError(
            f"{path}: format version {header.get('format_version')}, expected {FORMAT_VERSION}"
        )
    if header.get("kind") != kind:
        raise WeightsError(f"{path} holds {header.get('kind')!r} weights, expected {kind!r}")
    if _digest(tensors) != header.get("sha256"):
        raise WeightsError(f"{path} is corrupt: tensor checksum does not match its header")
    try:
        config = msgspec.convert(header["config"], config_type)
    except msgspec.ValidationError as exc:
        raise WeightsError(f"{path}: config does not match {config_type.__name__}: {exc}") from exc
    return config, tensors, header.get("info", {})


def load_into(module: torch.nn.Module, tensors: dict[str, torch.Tensor], path: Path) -> None:
    """Copy tensors into module, converting dtype; a missing, extra or misshapen tensor is an error."""
    own = module.state_dict()
    missing = sorted(set(own) - set(tensors))
    extra = sorted(set(tensors) - set(own))
    if missing or extra:
        raise WeightsError(f"{path} does not match the model: missing {missing[:5]}, unexpected {extra[:5]}")
    for name, t in tensors.items():
        if tuple(t.shape) != tuple(own[name].shape):
            raise WeightsError(
                f"{path}: {name} has shape {tuple(t.shape)}, model wants {tuple(own[name].shape)}"
            )
    module.load_state_dict({k: v.to(own[k].dtype) for k, v in tensors.items()})
