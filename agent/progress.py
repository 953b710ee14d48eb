"""Events the minds publish on the session's bus: plan progress, the character's speech, Director status.

They are ``Event`` subclasses registered in the vocabulary (not agent-private Structs) because several
readers need them on the same bus the inputs travel: the Director folds progress and heard speech into its
memory, the server forwards ``character.speech``, ``director.plan`` and ``error`` to the client, and the
tracer times them like any other event.
"""

from __future__ import annotations

from typing import Literal

from events.vocabulary import Event, register


class PlanEvent(Event, frozen=True, kw_only=True):
    """Common fields of block progress: which block, from whom, and the chunk it happened in."""

    block_id: str
    source: str
    epoch: int
    chunk: int
    label: str = ""


class BlockStarted(PlanEvent, frozen=True, kw_only=True, tag="plan.started"):
    """A block began at ``chunk``."""


class StrokeReached(PlanEvent, frozen=True, kw_only=True, tag="plan.stroke"):
    """The stroke (most visible moment) of action ``behavior`` fell in ``chunk``."""

    behavior: str
    action: str


class BlockEnded(PlanEvent, frozen=True, kw_only=True, tag="plan.ended"):
    """A block finished all of its behaviors."""


class BlockDropped(PlanEvent, frozen=True, kw_only=True, tag="plan.dropped"):
    """A block died before it started: a stale epoch, an expiry, or replaced while waiting."""

    reason: Literal["stale", "expired", "replaced", "interrupted"]


class BlockInterrupted(PlanEvent, frozen=True, kw_only=True, tag="plan.interrupted"):
    """A running block was stopped before its end."""

    reason: Literal["interrupt", "replaced", "stale"]


UnshownReason = Literal[
    "cooldown", "no_reaction", "outranked", "stale", "expired", "replaced", "interrupted", "interrupt"
]
"""Why an input will not show: the reflex that answers it is cooling down; nothing answers it; every block
it caused ended without ever owning a channel (a higher source held them); or its blocks died before they
showed (a newer epoch, an expiry, replaced, interrupted)."""


class InputUnshown(Event, frozen=True, kw_only=True, tag="input.unshown"):
    """Input event ``cause`` will not show in any frame (protocol ``input.outcome``)."""

    cause: str
    reason: UnshownReason
    detail: str = ""


class CharacterSpeech(Event, frozen=True, kw_only=True, tag="character.speech"):
    """The character's own speech (protocol ``character.speech``): ``heard_text`` is what was played."""

    speech_id: str
    block_id: str
    source: str
    text: str
    state: Literal["started", "ended", "interrupted"]
    heard_text: str | None = None
    chunk: int


class DirectorPlan(Event, frozen=True, kw_only=True, tag="director.plan"):
    """The Director sent a block to the realizer (protocol ``director.plan``)."""

    plan_id: str
    epoch: int
    summary: str


class DirectorError(Event, frozen=True, kw_only=True, tag="director.error"):
    """The Director's LLM failed; the character carries on (protocol ``error`` with code ``director``)."""

    code: Literal["director"] = "director"
    message: str
    fatal: bool = False
    attempt: int = 1


for _event_type in (
    BlockStarted,
    StrokeReached,
    BlockEnded,
    BlockDropped,
    BlockInterrupted,
    CharacterSpeech,
    DirectorPlan,
    DirectorError,
    InputUnshown,
):
    register(_event_type)
