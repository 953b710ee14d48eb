"""The story's section of the Director's system prompt: where the story stands and how to steer it."""

from __future__ import annotations

import json

from agent.story.engine import offered
from agent.story.graph import StoryGraph
from agent.story.state import StoryState


def story_prompt(graph: StoryGraph, state: StoryState) -> str:
    """The story section of the Director's system prompt at ``state``: the story, the current beat, goals,
    variables, the choices offered, every beat, and how to steer with the story tools."""
    spec = graph.spec
    beat = graph.beat(state.beat)
    lines = [
        f"You are playing the story {json.dumps(spec.title or spec.id)}. {spec.description}".strip(),
        f"Current beat `{beat.id}`: {beat.spec.description}",
    ]
    goals = {
        **{c: "; ".join(ch.goals) for c, ch in spec.characters.items() if ch.goals},
        **beat.spec.goals,
    }
    if goals:
        lines.append("Goals: " + "; ".join(f"{who}: {goal}" for who, goal in goals.items()))
    if state.variables:
        lines.append("Variables: " + ", ".join(f"{k}={json.dumps(v)}" for k, v in state.variables.items()))
    choices = offered(graph, state)
    if beat.spec.ending:
        lines.append("This beat is an ending.")
    elif choices:
        lines.append("Choices offered now: " + "; ".join(f"`{c.id}`: {c.spec.label}" for c in choices))
    lines.append(
        "Beats: "
        + "; ".join(
            f"`{b.id}`{' (ending)' if b.spec.ending else ''}: {b.spec.title or b.spec.description[:60]}"
            for b in graph.beats.values()
        )
    )
    lines.append(
        "When the user steps into the story, map what they want onto an offered choice with story_choose; "
        "when no choice fits, write a new beat with story_add_branch whose choices lead back to beats of "
        "the story, then play it."
    )
    return "\n".join(lines)
