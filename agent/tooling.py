"""What the Director needs from its tools, defined here so that agent/ never imports tools/.

The tools package implements ``ToolSet`` (its ``ToolBox``) and acts on a ``ToolContext``; the session
conductor hands the Director a tool set. Later layers (the story) register their own tools in it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from agent.plans import Block
from agent.realizer import Submission
from agent.script import Place


@dataclass
class ToolContext:
    """What the tools of one Director run act on.

    submit: hands a block to the realizer (the Director fills in source, epoch and cause).
    places: named spots of the scene for look_at and move_to. memory: facts kept across runs.
    delay_s: set by ``wait``; later blocks of the same run start that much later.
    submitted: ids of the blocks this run's tools got accepted.
    """

    submit: Callable[[Block], Submission]
    places: dict[str, Place] = field(default_factory=dict)
    memory: list[str] = field(default_factory=list)
    delay_s: float = 0.0
    submitted: list[str] = field(default_factory=list)


class ToolAnswer(Protocol):
    """The result of one tool call as the Director sees it."""

    @property
    def ok(self) -> bool: ...

    def to_text(self) -> str:
        """The text given back to the LLM as the tool message."""
        ...


class ToolSet(Protocol):
    """Tools offered to the LLM: their schemas, and calls that report failures instead of raising."""

    def schemas(self) -> list[dict[str, Any]]: ...

    async def call(self, name: str, arguments: str, context: ToolContext) -> ToolAnswer: ...
