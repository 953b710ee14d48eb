"""The ``remember`` tool: a fact kept in the Director's memory (``ToolContext.memory``)."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from agent.tooling import ToolContext
from tools.arguments import args_struct
from tools.registry import Tool

MAX_MEMORY = 50
"""Facts kept by ``remember``; the oldest go first (the prompt must stay small)."""


def remember_tool() -> Tool[Any, ToolContext]:
    """``remember``: keep a fact, dropping the oldest beyond ``MAX_MEMORY``."""
    RememberArgs = args_struct(
        "remember", [("fact", Annotated[str, msgspec.Meta(min_length=1, max_length=300)])], "Remember a fact."
    )

    async def remember(a: Any, ctx: ToolContext) -> dict[str, Any]:
        ctx.memory.append(a.fact)
        del ctx.memory[:-MAX_MEMORY]
        return {"facts": len(ctx.memory)}

    return Tool("remember", "Remember a fact about the user or the conversation.", RememberArgs, remember)
