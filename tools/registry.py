"""A registry of LLM tools: msgspec argument types, their JSON Schemas, and calls that never raise.

Each tool has an argument Struct; ``msgspec.json.schema`` of that Struct is the function's ``parameters``
in the OpenAI tools format, so what the LLM sees and what is validated are the same thing. ``call``
decodes the arguments against the Struct and runs the handler; any failure (bad JSON, a field out of
range, an unknown tool, a handler that refuses) comes back as a ``ToolResult`` with ``error`` set, which
the Director hands to the LLM as the tool's answer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

import msgspec

A = TypeVar("A", bound=msgspec.Struct)
C = TypeVar("C")


class ToolError(Exception):
    """Raised by a handler for arguments that are well-formed but cannot be carried out."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class ToolResult(msgspec.Struct, frozen=True, omit_defaults=True):
    """The answer to one tool call: ``ok`` with a result, or an ``error`` (naming ``field`` if known)."""

    ok: bool
    result: dict[str, Any] = {}
    error: str | None = None
    field: str | None = None

    def to_text(self) -> str:
        """The JSON text given to the LLM as the tool message."""
        return msgspec.json.encode(self).decode()


Handler = Callable[[A, C], Awaitable[dict[str, Any]]]


class Tool(Generic[A, C]):
    """One tool: a name, what it does (for the LLM), its argument type and its handler."""

    def __init__(self, name: str, description: str, args: type[A], handler: Handler[A, C]) -> None:
        self.name = name
        self.description = description
        self.args = args
        self.handler = handler
        self._decoder = msgspec.json.Decoder(args)

    def schema(self) -> dict[str, Any]:
        """The OpenAI ``tools`` entry: a function whose parameters are the argument type's JSON Schema."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": parameters_schema(self.args),
            },
        }

    def decode(self, arguments: str) -> A:
        """Decode JSON arguments (an empty string means no arguments)."""
        return self._decoder.decode(arguments.strip() or "{}")


def parameters_schema(args: type[msgspec.Struct]) -> dict[str, Any]:
    """The JSON Schema of ``args`` with the Struct itself at the root (nested types under ``$defs``)."""
    schema = msgspec.json.schema(args)
    defs: dict[str, Any] = dict(schema.get("$defs", {}))
    root = dict(defs.pop(args.__name__))
    root.pop("title", None)
    if defs:
        root["$defs"] = defs
    return root


class ToolBox(Generic[C]):
    """The tools offered to the LLM in one session; later issues (the story) register their own."""

    def __init__(self) -> None:
        self._tools: dict[str, Tool[Any, C]] = {}
        self._schemas: list[dict[str, Any]] | None = None

    def register(self, tool: Tool[Any, C]) -> None:
        """Offer ``tool`` (a name already taken is an error: two tools must not shadow each other)."""
        if tool.name in self._tools:
            raise ValueError(f"a tool named {tool.name!r} is already registered")
        self._tools[tool.name] = tool
        self._schemas = None

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def schemas(self) -> list[dict[str, Any]]:
        """Every tool in the OpenAI ``tools`` format, in registration order (built once, sent every call)."""
        if self._schemas is None:
            self._schemas = [tool.schema() for tool in self._tools.values()]
        return self._schemas

    async def call(self, name: str, arguments: str, context: C) -> ToolResult:
        """Run tool ``name`` with JSON ``arguments``; every failure becomes an error result."""
        tool = self._tools.get(name)
        if tool is None:
            return ToolResult(ok=False, error=f"unknown tool {name!r}; the tools are {self.names}")
        try:
            args = tool.decode(arguments)
        except msgspec.ValidationError as exc:
            message, _, where = str(exc).rpartition(" - at `")
            field = where.rstrip("`").removeprefix("$.") if where else None
            return ToolResult(ok=False, error=message or str(exc), field=field)
        except msgspec.DecodeError as exc:
            return ToolResult(ok=False, error=f"arguments are not valid JSON: {exc}")
        try:
            result = await tool.handler(args, context)
        except ToolError as exc:
            return ToolResult(ok=False, error=exc.message, field=exc.field)
        return ToolResult(ok=True, result=result)
