"""The small serialisable state of a story being played, its history tree, and what ``story.state`` shows.

``StoryState`` is where the story stands (beat, variables, visit counts, seed): it is what a checkpoint
keeps and a rewind restores. The history is a tree of ``HistoryNode``: one node per beat entered, each
with its checkpoint; a rewind moves the current node back, and the next move adds a sibling, so a fork
keeps both timelines. ``StoryView`` is the ``story.state`` message's content (``node``, ``choices``,
``checkpoint``, ``history``) plus what a page shows of the beat.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from agent.story.expr import Value

Via = Literal["start", "choice", "intervention"]


class StoryState(msgspec.Struct, frozen=True, kw_only=True):
    """Where the story stands: the current beat, the variables, how often each beat was entered, and the
    session's seed (the generator's; a restarted server reopens the generator with it)."""

    beat: str
    variables: dict[str, Value]
    visits: dict[str, int]
    seed: int


class HistoryNode(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One beat entered: its checkpoint id, the node it came from, how (a choice, an intervention's text).

    ``checkpoint`` doubles as the node's id: there is exactly one checkpoint per node.
    """

    checkpoint: str
    beat: str
    via: Via
    parent: str | None = None
    choice: str | None = None
    text: str | None = None


class ChoiceView(msgspec.Struct, frozen=True):
    """A choice as offered to the user."""

    id: str
    label: str


class StoryView(msgspec.Struct, frozen=True, kw_only=True):
    """What ``story.state`` carries: ``node`` (the beat id), the choices offered, the current checkpoint and
    the history tree (every node with its parent, in the order they were made); plus the beat's title and
    description, the variables and whether the story has ended."""

    node: str
    choices: list[ChoiceView]
    checkpoint: str
    history: list[HistoryNode]
    story: str
    title: str
    description: str
    variables: dict[str, Value]
    ending: bool
