"""Blocks to and from JSON (``msgspec.json``) and TOML (``tomllib`` to read, ``agent.toml_writer`` to
write); a wrong shape raises ``PlanError`` naming the field, e.g. ``behaviors[0].name``."""

from __future__ import annotations

import re
import tomllib

import msgspec

from agent.plans import Block, PlanError
from agent.toml_writer import dumps as toml_dumps

_json_decoder = msgspec.json.Decoder(Block)


def block_from_json(data: bytes | str) -> Block:
    """Decode a block from JSON; a wrong shape raises ``PlanError`` naming the field."""
    try:
        return _json_decoder.decode(data)
    except msgspec.ValidationError as exc:
        raise shape_error(exc) from None
    except msgspec.DecodeError as exc:
        raise PlanError("$", f"not valid JSON: {exc}") from None


def block_from_builtins(data: object) -> Block:
    """Convert parsed JSON or TOML (dicts, lists...) into a block; ``PlanError`` names a bad field."""
    try:
        return msgspec.convert(data, Block)
    except msgspec.ValidationError as exc:
        raise shape_error(exc) from None


def block_from_toml(text: str) -> Block:
    """Parse a block from TOML text."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PlanError("$", f"not valid TOML: {exc}") from None
    return block_from_builtins(data)


def block_to_json(block: Block) -> bytes:
    """The block as JSON."""
    return msgspec.json.encode(block)


def block_to_toml(block: Block) -> str:
    """The block as TOML (fields left at their defaults are omitted, as None has no TOML form)."""
    return toml_dumps(msgspec.to_builtins(block))


def shape_error(exc: msgspec.ValidationError) -> PlanError:
    """Turn msgspec's "... - at `$.behaviors[0].name`" into a PlanError on that field."""
    text = str(exc)
    message, sep, where = text.rpartition(" - at `")
    if not sep:
        message, where = text, "$"
    where = where.rstrip("`")
    unknown = re.search(r"unknown field `([^`]+)`", message)
    if unknown:
        where = f"{where}.{unknown.group(1)}"
    return PlanError(where.removeprefix("$.") or "$", message)
