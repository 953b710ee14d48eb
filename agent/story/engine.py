"""The story's rules as pure functions over an immutable graph and a state: what is offered, what a
choice does. No clock, no realizer, no I/O (``agent.story.player`` plays them in a session)."""

from __future__ import annotations

import re

from agent.story.format import StoryError
from agent.story.graph import CompiledChoice, StoryGraph
from agent.story.state import ChoiceView, StoryState


def initial_state(graph: StoryGraph, seed: int | None = None) -> StoryState:
    """The state at the start beat (entered once), with the declared variables' initial values."""
    start = graph.spec.start
    return StoryState(
        beat=start,
        variables=dict(graph.spec.variables),
        visits={start: 1},
        seed=graph.spec.seed if seed is None else seed,
    )


def offered(graph: StoryGraph, state: StoryState) -> list[CompiledChoice]:
    """The current beat's choices whose conditions hold, in the order written."""
    return [
        c
        for c in graph.beat(state.beat).choices
        if c.condition is None or c.condition.evaluate(state.variables)
    ]


def views(choices: list[CompiledChoice]) -> list[ChoiceView]:
    """Choices as the user sees them."""
    return [ChoiceView(c.id, c.spec.label) for c in choices]


def enter(state: StoryState, beat: str) -> StoryState:
    """``state`` moved to ``beat``, counting the visit."""
    visits = dict(state.visits)
    visits[beat] = visits.get(beat, 0) + 1
    return StoryState(beat=beat, variables=dict(state.variables), visits=visits, seed=state.seed)


def take(graph: StoryGraph, state: StoryState, choice_id: str) -> tuple[CompiledChoice, StoryState]:
    """Apply choice ``choice_id``: its effects in order, then its target. ``StoryError`` when the story has
    ended, the beat has no such choice, or its condition does not hold (the message says which)."""
    beat = graph.beat(state.beat)
    if beat.spec.ending:
        raise StoryError.one("choice", f"the story has ended (at {beat.id!r}); rewind to a checkpoint")
    choice = beat.choice(choice_id)
    if choice is None:
        ids = [c.id for c in offered(graph, state)]
        raise StoryError.one("choice", f"no choice {choice_id!r} in beat {beat.id!r}; offered: {ids}")
    if choice.condition is not None and not choice.condition.evaluate(state.variables):
        now = {name: state.variables[name] for name in sorted(choice.condition.reads)}
        raise StoryError.one(
            "choice",
            f"choice {choice_id!r} is not available: it needs `{choice.condition.source}` (now {now})",
        )
    variables = dict(state.variables)
    for effect in choice.effects:
        variables = effect.apply(variables)
    moved = StoryState(beat=state.beat, variables=variables, visits=state.visits, seed=state.seed)
    return choice, enter(moved, choice.spec.target)


_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset(
    "a an the to of and or in on at into onto with for from up down out go goes going let lets me my you "
    "your he she it they them we us i is are be do does should could would can will please then now".split()
)


def words(text: str) -> set[str]:
    """The meaningful words of ``text`` (lower case, little words left out)."""
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP}


def match_choice(text: str, choices: list[CompiledChoice]) -> CompiledChoice | None:
    """The one offered choice that free text names: by id, or by sharing more of its label's words and
    keywords than any other choice does. None when nothing matches or two choices tie."""
    wanted = text.strip().lower()
    for choice in choices:
        if wanted == choice.id.lower() or wanted == choice.spec.label.strip().lower():
            return choice
    given = words(text)
    scored = sorted(
        (
            (len(given & (words(c.spec.label) | words(" ".join(c.spec.keywords)) | {c.id.lower()})), c)
            for c in choices
        ),
        key=lambda pair: -pair[0],
    )
    if not scored or scored[0][0] == 0 or (len(scored) > 1 and scored[1][0] == scored[0][0]):
        return None
    return scored[0][1]
