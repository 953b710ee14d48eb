"""The tools for when plans run: ``schedule_block`` (behaviors together, with sync points) and ``wait``
(delay the rest of the turn's plans)."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from agent.plans import Behavior, Block, SceneEvent
from agent.tooling import ToolContext
from tools.arguments import CompositionArg, Seconds, args_struct
from tools.emit import emit
from tools.registry import Tool, ToolError

MAX_BEHAVIORS = 32
"""Behaviors in one ``schedule_block`` (a huge block would only cost the realizer and the event loop)."""

SCENE_NOT_SHOWN = "the scene cannot change yet: scene events are not drawn"


def schedule_tools(scene_shown: bool) -> list[Tool[Any, ToolContext]]:
    """``schedule_block`` (which names the scene events of a block that are not drawn, unless
    ``scene_shown``, and refuses a block of only those) and ``wait``."""
    return [_schedule_block(scene_shown), _wait()]


def _schedule_block(scene_shown: bool) -> Tool[Any, ToolContext]:
    BlockArgs = args_struct(
        "schedule_block",
        [
            ("behaviors", Annotated[list[Behavior], msgspec.Meta(min_length=1, max_length=MAX_BEHAVIORS)]),
            ("composition", CompositionArg, "merge"),
            ("priority", Annotated[int, msgspec.Meta(ge=0, le=10)], 0),
            ("label", str, ""),
            ("expires_s", Seconds | None, None),
        ],
        "Schedule a block of behaviors with sync points.",
    )

    async def schedule_block(a: Any, ctx: ToolContext) -> dict[str, Any]:
        scene = [] if scene_shown else [b.name for b in a.behaviors if isinstance(b, SceneEvent)]
        if len(scene) == len(a.behaviors):
            raise ToolError(SCENE_NOT_SHOWN, "behaviors")
        block = Block(
            behaviors=a.behaviors,
            composition=a.composition,
            priority=a.priority,
            label=a.label,
            expires_s=a.expires_s,
        )
        result = emit(ctx, block)
        if scene:
            result["not_shown"] = {"scene": scene, "why": SCENE_NOT_SHOWN}
        return result

    return Tool(
        "schedule_block",
        "Schedule several behaviors together with sync points, e.g. a wave whose stroke lands on a word, "
        "or a walk that starts 2 s after speech ends.",
        BlockArgs,
        schedule_block,
    )


def _wait() -> Tool[Any, ToolContext]:
    WaitArgs = args_struct("wait", [("seconds", Seconds)], "Wait before the next plans of this turn.")

    async def wait(a: Any, ctx: ToolContext) -> dict[str, Any]:
        ctx.delay_s += a.seconds
        return {"delay_s": ctx.delay_s}

    return Tool("wait", "Delay the plans you make after this call in the same turn.", WaitArgs, wait)
