"""How a character tool hands its plan ``Block`` to the Director: ``emit``, after any earlier ``wait``."""

from __future__ import annotations

import re
from typing import Any

import msgspec

from agent.plans import Action, Behavior, Block, PlanError, SyncRef, Wait, with_ids
from agent.tooling import ToolContext
from tools.registry import ToolError


def emit(ctx: ToolContext, block: Block, fields: dict[str, str] | None = None) -> dict[str, Any]:
    """Submit ``block`` (delayed by earlier ``wait`` calls); a refusal becomes a ``ToolError``.

    ``fields`` renames a refused plan field (its path below ``behaviors[i].``) to the tool argument it came
    from, so the LLM is told about the argument it wrote: ``params.paw`` -> ``paw``.
    """
    if ctx.delay_s > 0:
        block = delayed(block, ctx.delay_s)
    try:
        submission = ctx.submit(block)
    except PlanError as exc:
        inner = re.sub(r"^behaviors\[\d+\]\.", "", exc.field)
        raise ToolError(exc.message, (fields or {}).get(inner, exc.field)) from None
    if not submission.accepted:
        raise ToolError(f"the plan was not accepted: {submission.reason}")
    ctx.submitted.append(submission.block_id)
    result: dict[str, Any] = {"block": submission.block_id}
    if submission.after:
        result["after"] = list(submission.after)
    return result


def delayed(block: Block, seconds: float) -> Block:
    """``block`` with every behavior that has no start of its own pushed ``seconds`` later."""
    block = with_ids(block)
    behaviors: list[Behavior] = [Wait(id="_delay", duration_s=seconds)]
    for b in block.behaviors:
        placed = b.start is not None or (isinstance(b, Action) and b.stroke is not None)
        if not placed:
            b = msgspec.structs.replace(b, start=SyncRef(to="_delay", point="end"))
        behaviors.append(b)
    return msgspec.structs.replace(block, behaviors=behaviors)
