"""Snapshot blobs of the story store: the realizer's snapshot, and the generator's (the blob format, its
checks and the generator's document live in ``streaming_model.blobs``, which backends use too).
"""

from __future__ import annotations

from typing import Literal

import msgspec

from agent.realizer import RealizerSnapshot, RealizerState
from streaming_model.blobs import (
    MAGIC,
    PICKLE_REFUSED,
    VERSION,
    BlobError,
    decode_generator,
    encode_generator,
    unwrap,
    wrap,
)

__all__ = [
    "MAGIC",
    "PICKLE_REFUSED",
    "VERSION",
    "BlobError",
    "decode_generator",
    "decode_realizer",
    "encode_generator",
    "encode_realizer",
]


class _RealizerDoc(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    version: int
    kind: Literal["realizer"]
    state: RealizerState


def encode_realizer(snapshot: RealizerSnapshot) -> bytes:
    """A realizer snapshot as a blob."""
    return wrap(_RealizerDoc(version=VERSION, kind="realizer", state=snapshot.to_state()))


def decode_realizer(blob: bytes) -> RealizerSnapshot:
    """The realizer snapshot in ``blob``; ``BlobError`` if it is not one this code can read."""
    doc = unwrap(blob, "realizer", _RealizerDoc)
    try:
        return RealizerSnapshot.from_state(doc.state)
    except ValueError:
        raise BlobError("inconsistent (its parts do not fit together)") from None
