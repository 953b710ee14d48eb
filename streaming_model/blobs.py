"""State blobs: snapshots as data that cannot run code, for the story store and for backends' exports.

A blob is ``MAGIC``, the SHA-256 of the rest, and a msgpack document decoded into a typed msgspec Struct:
the format version, the kind of snapshot and its fields; arrays travel as dtype, shape and little-endian
bytes. Reading checks, in order: the magic (an old pickled row is named as such and never unpickled), the
checksum (a corrupt blob), the version (a blob of a newer onstage), the kind, then the document's types
and the snapshot's own consistency. Every failure is a ``BlobError`` whose message says which of these it
was, briefly, for a client to read.

Encoding and decoding cost a few milliseconds for a generator snapshot: callers on the event loop run
them in a worker thread.
"""

from __future__ import annotations

import hashlib
import math
from typing import Literal, TypeVar, get_args

import msgspec
import numpy as np

from .kv_cache import SnapshotError
from .runtime import SessionSnapshot, SnapshotMeta

MAGIC = b"ONSTGSNP"
VERSION = 1
"""The blob format this code writes and the newest it reads."""

DType = Literal["int8", "float32", "float64"]
_DIGEST = 32
_Doc = TypeVar("_Doc", bound=msgspec.Struct)

PICKLE_REFUSED = "an old pickle, refused (a pickle can run code): take this checkpoint again"


class BlobError(SnapshotError):
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


class _GeneratorDoc(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    version: int
    kind: Literal["generator"]
    meta: SnapshotMeta
    arrays: dict[str, Array]


def encode_generator(snapshot: SessionSnapshot) -> bytes:
    """A streaming runtime's snapshot as a blob."""
    meta, arrays = snapshot.export()
    return wrap(
        _GeneratorDoc(
            version=VERSION,
            kind="generator",
            meta=meta,
            arrays={name: to_array(a) for name, a in arrays.items()},
        )
    )


def decode_generator(blob: bytes) -> SessionSnapshot:
    """The runtime snapshot in ``blob``; ``BlobError`` if it is not one this code can read."""
    doc = unwrap(blob, "generator", _GeneratorDoc)
    arrays = {name: from_array(a) for name, a in doc.arrays.items()}
    try:
        return SessionSnapshot.from_export(doc.meta, arrays)
    except SnapshotError:
        raise BlobError("inconsistent (its arrays do not make a generator state)") from None


def to_array(a: np.ndarray) -> Array:
    """``a`` as a blob array (``ValueError`` for a dtype blobs do not carry)."""
    if str(a.dtype) not in get_args(DType):
        raise ValueError(f"snapshot arrays of dtype {a.dtype} have no blob encoding")
    little = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<"))
    return Array(str(a.dtype), tuple(a.shape), little.tobytes())  # type: ignore[arg-type]


def from_array(a: Array) -> np.ndarray:
    """The numpy array of a blob array; ``BlobError`` if its shape does not match its bytes."""
    dtype = np.dtype(a.dtype).newbyteorder("<")
    if any(n < 0 for n in a.shape) or math.prod(a.shape) * dtype.itemsize != len(a.data):
        raise BlobError("inconsistent (an array's shape does not match its bytes)")
    return np.frombuffer(a.data, dtype=dtype).reshape(a.shape).astype(dtype.newbyteorder("="))


def wrap(doc: msgspec.Struct) -> bytes:
    """A document (with ``version`` and ``kind`` fields) as a blob."""
    body = msgspec.msgpack.encode(doc)
    return MAGIC + hashlib.sha256(body).digest() + body


def unwrap(blob: bytes, kind: str, doc_type: type[_Doc]) -> _Doc:
    """The document of kind ``kind`` in ``blob``; ``BlobError`` saying why it is not one."""
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
