"""The Director's story tools: take a choice of the story, or write a new beat into this session's story.

story_choose maps what the user asked for onto an offered choice; story_add_branch writes a new beat (a
description, what the character does on entering it, and choices leading back into the story) that is
validated like any beat of a story file and, if sound, added to this session's story and entered. A
branch that is not sound is refused with every problem and its path (``branch.storm.choices[0].target:
unknown target ...``), which the Director hands back to the LLM to fix.

The tools act on the session's ``StoryPlayer``; register them in the session's tool box with
``register_story_tools`` after the player is made (the Director reads the tool schemas at every call).
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from agent.plans import Block, Speech
from agent.story.format import Beat, Choice, StoryError
from agent.story.player import StoryPlayer
from agent.story.state import StoryView
from agent.tooling import ToolContext
from tools.registry import Tool, ToolBox, ToolError

Id = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_-]{1,64}$", description="letters, digits, - and _")]


class ChooseArgs(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Take one of the choices the story offers now."""

    choice: Annotated[str, msgspec.Meta(description="The id of an offered choice.")]


class AddBranchArgs(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A new beat for this session's story."""

    id: Annotated[Id, msgspec.Meta(description="A new beat id, not used in the story yet.")]
    description: Annotated[
        str, msgspec.Meta(min_length=1, max_length=600, description="What happens in this beat.")
    ]
    title: Annotated[str, msgspec.Meta(max_length=80)] = ""
    say: (
        Annotated[
            str,
            msgspec.Meta(min_length=1, max_length=600, description="What the character says on entering."),
        ]
        | None
    ) = None
    emotion: Annotated[str, msgspec.Meta(description="The emotion `say` is spoken with.")] | None = None
    plan: (
        Annotated[Block, msgspec.Meta(description="A full plan block for entering, instead of `say`.")] | None
    ) = None
    goals: Annotated[
        dict[str, str], msgspec.Meta(description="Character id -> what they want in this beat.")
    ] = {}
    choices: Annotated[
        list[Choice],
        msgspec.Meta(
            max_length=8,
            description="Ways on: each leads to a beat of the story (`target`), with an optional condition "
            "(`when`, e.g. `trust >= 2 and not has_key`) and effects (e.g. `trust += 1`, `has_key = true`).",
        ),
    ] = []
    ending: Annotated[bool, msgspec.Meta(description="This beat ends the story (then no choices).")] = False


def _answer(view: StoryView) -> dict[str, Any]:
    return {
        "beat": view.node,
        "checkpoint": view.checkpoint,
        "choices": [{"id": c.id, "label": c.label} for c in view.choices],
        "ending": view.ending,
    }


def _refused(exc: StoryError, what: str) -> ToolError:
    return ToolError(f"{what} was refused: {exc}", exc.problems[0].where if exc.problems else None)


def story_tools(player: StoryPlayer) -> list[Tool[Any, ToolContext]]:
    """The story tools acting on ``player``."""

    async def choose(a: ChooseArgs, ctx: ToolContext) -> dict[str, Any]:
        try:
            return _answer(await player.choose_for_director(a.choice))
        except StoryError as exc:
            raise _refused(exc, "the choice") from None

    async def add_branch(a: AddBranchArgs, ctx: ToolContext) -> dict[str, Any]:
        if a.plan is not None and a.say is not None:
            raise ToolError("give `say` or `plan`, not both", "say")
        if a.emotion is not None and a.say is None:
            raise ToolError("`emotion` goes with `say`", "emotion")
        plan = a.plan
        if a.say is not None:
            plan = Block(behaviors=[Speech(text=a.say, emotion=a.emotion)])
        beat = Beat(
            description=a.description,
            title=a.title,
            goals=a.goals,
            plan=plan,
            choices=a.choices,
            ending=a.ending,
        )
        try:
            return _answer(await player.add_branch(a.id, beat))
        except StoryError as exc:
            raise _refused(exc, "the branch") from None

    return [
        Tool(
            "story_choose",
            "Take one of the story's offered choices (what the user's intervention means, when it matches).",
            ChooseArgs,
            choose,
        ),
        Tool(
            "story_add_branch",
            "Write a new beat into the story when no offered choice fits what the user wants, and enter it. "
            "Its choices must lead back to beats of the story (or it is an ending).",
            AddBranchArgs,
            add_branch,
        ),
    ]


def register_story_tools(box: ToolBox[ToolContext], player: StoryPlayer) -> None:
    """Offer the story tools for ``player`` in ``box`` (the session's Director tool box)."""
    for tool in story_tools(player):
        box.register(tool)
