"""The tools that aim at a point or a named place of the scene: ``look_at`` (the head too, ``turn_head``,
for a model with a ``look_at`` action) and ``move_to`` (only for a model that can walk, ``plans.WALKS``)."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from agent.plans import WALKS, Action, Behavior, Block, Gaze, Move
from agent.script import Place
from agent.tooling import ToolContext
from tools.arguments import CompositionArg, Seconds, Unit, Vocabulary, args_struct
from tools.emit import emit
from tools.registry import Tool, ToolError


def place_tools(v: Vocabulary) -> list[Tool[Any, ToolContext]]:
    """``look_at``, and ``move_to`` if the manifest of ``v`` can walk."""
    can_walk = set(v.names).issuperset(WALKS)
    return [_look_at(v), *([_move_to(v)] if can_walk else [])]


def _place_of(ctx: ToolContext, name: str | None) -> Place | None:
    if name is None:
        return None
    place = ctx.places.get(name)
    if place is None:
        raise ToolError(f"unknown place {name!r}; places: {sorted(ctx.places)}", "place")
    return place


def _look_at(v: Vocabulary) -> Tool[Any, ToolContext]:
    turns_head = "look_at" in v.names
    LookArgs = args_struct(
        "look_at",
        [
            (
                "x",
                Annotated[Unit, msgspec.Meta(description="-1 left .. 1 right; 0 is the user")] | None,
                None,
            ),
            ("y", Annotated[Unit, msgspec.Meta(description="-1 top .. 1 bottom")] | None, None),
            ("place", v.place | None, None),
            ("duration_s", Seconds, 2.0),
            *([("turn_head", bool, False)] if turns_head else []),
        ],
        "Look at a point or a place.",
    )

    async def look_at(a: Any, ctx: ToolContext) -> dict[str, Any]:
        place = _place_of(ctx, a.place)
        if place is None and a.x is None:
            raise ToolError("give x (and y) or a place", "x")
        x, y = place.gaze if place is not None else (a.x, a.y or 0.0)
        look: Behavior = Gaze(x=x, y=y, duration_s=a.duration_s)
        if turns_head and a.turn_head:
            look = Action(name="look_at", params={"target_x": x, "target_y": y}, duration_s=a.duration_s)
        return emit(ctx, Block(behaviors=[look], label="look"))

    return Tool("look_at", "Look at a point on screen or a named place.", LookArgs, look_at)


def _move_to(v: Vocabulary) -> Tool[Any, ToolContext]:
    MoveArgs = args_struct(
        "move_to",
        [
            (
                "x",
                Annotated[Unit, msgspec.Meta(description="Floor position, -1 left .. 1 right")] | None,
                None,
            ),
            ("place", v.place | None, None),
            ("composition", CompositionArg, "append"),
        ],
        "Walk to a floor position or a place.",
    )

    async def move_to(a: Any, ctx: ToolContext) -> dict[str, Any]:
        place = _place_of(ctx, a.place)
        if place is None and a.x is None:
            raise ToolError("give x or a place", "x")
        x = place.x if place is not None else a.x
        return emit(ctx, Block(behaviors=[Move(x=x)], composition=a.composition, label="move"))

    return Tool("move_to", "Walk to a floor position or a named place.", MoveArgs, move_to)
