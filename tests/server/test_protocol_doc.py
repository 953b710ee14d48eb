"""docs/protocol.md is the contract: every message type the server accepts and sends, every field of them,
every error code and every media header field is written there."""

from __future__ import annotations

import re
import typing
from pathlib import Path

import msgspec
import pytest

from server import protocol as p

DOC = (Path(__file__).parents[2] / "docs" / "protocol.md").read_text()


def table_rows(heading: str) -> dict[str, set[str]]:
    """Message type -> the backticked names in its fields cell, from the table under ``heading``."""
    section = DOC.split(f"## {heading}", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, set[str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`"):
            continue
        fields = set(re.findall(r"`([a-z_0-9.]+)`", cells[1]))
        for kind in re.findall(r"`([a-z_.]+)`", cells[0]):
            rows[kind] = fields
    return rows


def fields_of(cls: type[msgspec.Struct]) -> set[str]:
    return {f.name for f in msgspec.structs.fields(cls)} - {"ref"}


def server_messages() -> list[type[p.ServerMessage]]:
    return list(typing.get_args(p.AnyServerMessage))


def test_every_server_message_class_is_in_the_union_clients_decode() -> None:
    defined = {c for c in vars(p).values() if isinstance(c, type) and issubclass(c, p.ServerMessage)}
    assert defined - {p.ServerMessage} == set(server_messages())


def assert_documented(cls: type[msgspec.Struct], heading: str, role: str) -> None:
    rows = table_rows(heading)
    tag = cls.__struct_config__.tag
    assert tag in rows, f"{tag} is {role} by the server but not in docs/protocol.md"
    missing = fields_of(cls) - rows[tag]
    assert not missing, f"{tag}: fields {sorted(missing)} are not in docs/protocol.md"


@pytest.mark.parametrize("cls", p.CLIENT_MESSAGES, ids=lambda c: c.__struct_config__.tag)
def test_every_client_message_and_its_fields_are_documented(cls: type[p.ClientMessage]) -> None:
    assert_documented(cls, "Client -> server", "accepted")


@pytest.mark.parametrize("cls", server_messages(), ids=lambda c: c.__struct_config__.tag)
def test_every_server_message_and_its_fields_are_documented(cls: type[p.ServerMessage]) -> None:
    assert_documented(cls, "Server -> client", "sent")


def test_every_error_code_and_media_header_field_is_documented() -> None:
    for code in p.ErrorCode:
        assert f"`{code.value}`" in DOC, code
    for header in (p.VideoHeader, p.AudioHeader):
        for name in fields_of(header):
            assert f"`{name}`" in DOC, (header.__name__, name)


def test_the_documented_types_are_exactly_those_the_server_knows() -> None:
    client = {c.__struct_config__.tag for c in p.CLIENT_MESSAGES}
    server = {c.__struct_config__.tag for c in server_messages()}
    assert set(table_rows("Client -> server")) == client
    assert set(table_rows("Server -> client")) == server
