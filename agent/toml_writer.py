"""A small TOML writer for plain data (dicts, lists, strings, numbers, booleans), enough for plans.

Python's ``tomllib`` only reads TOML; writing our own few lines avoids a dependency. None values are left
out (TOML has no null), so they read back as the field's default.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import TypeGuard

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _key(key: str) -> str:
    return key if _BARE_KEY.match(key) else json.dumps(key)


def _value(value: object) -> str:
    """An inline TOML value (tables inside arrays and inline tables included)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        # JSON string escapes are valid TOML basic-string escapes.
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, Mapping):
        items = ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items() if v is not None)
        return "{ " + items + " }" if items else "{}"
    if isinstance(value, Sequence):
        return "[" + ", ".join(_value(v) for v in value if v is not None) + "]"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")


def _is_table_array(value: object) -> TypeGuard[list[Mapping[str, object]]]:
    return isinstance(value, list) and bool(value) and all(isinstance(v, Mapping) for v in value)


def _table(data: Mapping[str, object], prefix: str, out: list[str]) -> None:
    # Plain keys must come before any sub-table header, or they would land inside that sub-table.
    for key, value in data.items():
        if value is None or isinstance(value, Mapping) or _is_table_array(value):
            continue
        out.append(f"{_key(key)} = {_value(value)}")
    for key, value in data.items():
        name = f"{prefix}.{_key(key)}" if prefix else _key(key)
        if isinstance(value, Mapping):
            out.append("")
            out.append(f"[{name}]")
            _table(value, name, out)
        elif _is_table_array(value):
            for item in value:
                out.append("")
                out.append(f"[[{name}]]")
                _table(item, name, out)


def dumps(data: Mapping[str, object]) -> str:
    """``data`` as a TOML document."""
    out: list[str] = []
    _table(data, "", out)
    return "\n".join(out).lstrip("\n") + "\n"
