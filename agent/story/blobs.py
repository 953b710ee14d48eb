"""Snapshot blobs: the realizer's and the generator's snapshots as data that cannot run code.

A blob is ``MAGIC``, the SHA-256 of the rest, and a msgpack document decoded into a typed msgspec Struct:
the format version, the kind of snapshot and its fields; arrays travel as dtype, shape and little-endian
bytes. Reading checks, in order: the magic (an old pickled row is named as such and never unpickled), the
checksum (a corrupt blob), the version (a blob of a newer onstage), the kind, then the document's types
and the snapshot's own consistency. Every failure is a ``BlobError`` whose message says which of these it
was, briefly, for a client to read.

Encoding and decoding cost a few milliseconds for a generator snapshot: callers on the event loop run
them in a worker thread (the store does).
"""

from __future__ import annotations

import hashlib
import math
from typing import Literal, TypeVar, get_args

import msgspec
import numpy as np

from agent.realizer import RealizerSnapshot, RealizerState
from streaming_model.kv_cache import SnapshotError
from streaming_model.runtime import SessionSnapshot, SnapshotMeta

MAGIC = b"ONSTGSNP"
VERSION = 1
"""The blob format this code writes and the newest it reads."""

Kind = Literal["realizer", "generator"]
DType = Literal["int8", "float32", "float64"]
_DIGEST = 32
_Doc = TypeVar("_Doc", bound=msgspec.Struct)


PICKLE_REFUSED = "an old pickle, refused (a pickle can run code): take this checkpoint again"


class BlobError(ValueError):
    """A blob that is not a snapshot this code can read; the message says why, without internals."""


class Array(msgspec.Struct, frozen=True, array_like=True):
    """One array: its dtype, its shape and its bytes (little-endian, C order)."""

    dtype: DType
    shape: tuple[int, ...]
    data: bytes


class _Head(msgspec.Struct, frozen=True):
    """What every version's document starts with (other fields are read once the version is known)."""

    version: int
    kind: str


class _RealizerDoc(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    version: int
    kind: Literal["realizer"]
    state: RealizerState


class _GeneratorDoc(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    version: int
    kind: Literal["generator"]
    meta: SnapshotMeta
    arrays: dict[str, Array]


def encode_realizer(snapshot: RealizerSnapshot) -> bytes:
    """A realizer snapshot as a blob."""
    return _wrap(_RealizerDoc(version=VERSION, kind="realizer", state=snapshot.to_state()))


def decode_realizer(blob: bytes) -> RealizerSnapshot:
    """The realizer snapshot in ``blob``; ``BlobError`` if it is not one this code can read."""
    doc = _unwrap(blob, "realizer", _RealizerDoc)
    try:
        return RealizerSnapshot.from_state(doc.state)
    except ValueError:
        raise BlobError("inconsistent (its parts do not fit together)") from None


def encode_generator(snapshot: SessionSnapshot) -> bytes:
    """A streaming runtime's snapshot as a blob."""
    meta, arrays = snapshot.export()
    return _wrap(
        _GeneratorDoc(
            version=VERSION,
            kind="generator",
            meta=meta,
            arrays={name: _array(a) for name, a in arrays.items()},
        )
    )


def decode_generator(blob: bytes) -> SessionSnapshot:
    """The runtime snapshot in ``blob``; ``BlobError`` if it is not one this code can read."""
    doc = _unwrap(blob, "generator", _GeneratorDoc)
    try:
        return SessionSnapshot.from_export(doc.meta, {name: _ndarray(a) for name, a in doc.arrays.items()})
    except SnapshotError:
        raise BlobError("inconsistent (its arrays do not make a generator state)") from None


def _array(a: np.ndarray) -> Array:
    if str(a.dtype) not in get_args(DType):
        raise ValueError(f"snapshot arrays of dtype {a.dtype} have no blob encoding")
    little = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<"))
    return Array(str(a.dtype), tuple(a.shape), little.tobytes())  # type: ignore[arg-type]


def _ndarray(a: Array) -> np.ndarray:
    dtype = np.dtype(a.dtype).newbyteorder("<")
    if any(n < 0 for n in a.shape) or math.prod(a.shape) * dtype.itemsize != len(a.data):
        raise BlobError("inconsistent (an array's shape does not match its bytes)")
    return np.frombuffer(a.data, dtype=dtype).reshape(a.shape).astype(dtype.newbyteorder("="))


def _wrap(doc: msgspec.Struct) -> bytes:
    body = msgspec.msgpack.encode(doc)
    return MAGIC + hashlib.sha256(body).digest() + body


def _unwrap(blob: bytes, kind: Kind, doc_type: type[_Doc]) -> _Doc:
    if blob[:1] == b"\x80":  # the opcode every pickle of protocol 2 or later starts with
        raise BlobError(PICKLE_REFUSED)
    if not blob.startswith(MAGIC):
        raise BlobError("not an onstage snapshot")
    digest, body = blob[len(MAGIC) : len(MAGIC) + _DIGEST], blob[len(MAGIC) + _DIGEST :]
    if hashlib.sha256(body).digest() != digest:
        raise BlobError("corrupt (its checksum does not match)")
    try:
        head = msgspec.msgpack.decode(body, type=_Head)
    except msgspec.DecodeError:
        raise BlobError("corrupt (not a snapshot document)") from None
    if head.version > VERSION:
        raise BlobError(f"from a newer onstage (format {head.version}; this one reads up to {VERSION})")
    if head.version < 1:
        raise BlobError(f"of an unknown format version {head.version}")
    if head.kind != kind:
        raise BlobError(f"a {head.kind[:40]!r} snapshot where a {kind} one belongs")
    try:
        return msgspec.msgpack.decode(body, type=doc_type)
    except msgspec.DecodeError:
        raise BlobError(f"malformed (not a {kind} snapshot of format {head.version})") from None
