"""Imports flow one way (ARCHITECTURE.md): events and streaming_model -> agent -> tools -> server, and
the session core (server/core) knows no wire format: no protocol, no transport, no WebSocket."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

BELOW = {
    "events": {"agent", "tools", "server", "streaming_model"},
    "streaming_model": {"agent", "tools", "server", "events"},
    "agent": {"tools", "server"},
    "tools": {"server"},
}
"""What each package must not import."""

WIRE = ("server.protocol", "server.app", "server.adapter", "server.outbox", "server.client", "websockets")


def imports(path: Path) -> set[str]:
    """The modules a source file imports (absolute, as written)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return names


@pytest.mark.parametrize("package", sorted(BELOW))
def test_a_package_imports_nothing_from_the_layers_above_it(package: str) -> None:
    wrong = {
        f"{path.relative_to(ROOT)}: {name}"
        for path in (ROOT / package).rglob("*.py")
        for name in imports(path)
        if name.split(".")[0] in BELOW[package]
    }
    assert not wrong, sorted(wrong)


def test_the_session_core_knows_no_wire_format() -> None:
    wrong = {
        f"{path.relative_to(ROOT)}: {name}"
        for path in (ROOT / "server" / "core").rglob("*.py")
        for name in imports(path)
        if any(name == w or name.startswith(w + ".") for w in WIRE)
    }
    assert not wrong, sorted(wrong)
