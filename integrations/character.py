"""Driving the character from a pipeline: emotion, action and gaze as behaviors, and the LLM function tools
that ask for them, generated from the vocabulary the session names in ``session.started``.

A behavior reaches the session as ``plan.run`` of a plan (docs/plans.md) that keeps the session's base
plan (its idle variety and triggers) and plays the behavior at once.
"""

from __future__ import annotations

from typing import Any

import msgspec

from server import protocol as p

DEFAULT_PLAN: dict[str, Any] = {"name": "pipeline", "timeline": []}
"""The plan a pipeline's session starts with: idle variety, no speech of its own (the pipeline speaks)."""


class ToolSpec(msgspec.Struct, frozen=True):
    """One LLM function tool: its name, what it does, and its arguments as JSON Schema properties."""

    name: str
    description: str
    properties: dict[str, Any]
    required: list[str]


_DURATION = {"type": "number", "minimum": 0.2, "maximum": 20.0, "description": "seconds it lasts"}


def character_tools(started: p.SessionStarted) -> list[ToolSpec]:
    """The tools for this session's character: its emotions and actions are those it declared."""
    caps = started.capabilities
    return [
        ToolSpec(
            "set_emotion",
            "Show an emotion on the character's face while it talks or listens.",
            {"emotion": {"type": "string", "enum": list(caps.emotions)}, "duration_s": _DURATION},
            ["emotion"],
        ),
        ToolSpec(
            "do_action",
            "Have the character do a body action (a gesture, a move).",
            {"action": {"type": "string", "enum": list(caps.actions)}, "duration_s": _DURATION},
            ["action"],
        ),
        ToolSpec(
            "look_at",
            "Turn the character's eyes: x from -1 (its left of the screen) to 1 (right), y from -1 (up) to 1"
            " (down); 0, 0 looks at the user.",
            {
                "x": {"type": "number", "minimum": -1.0, "maximum": 1.0},
                "y": {"type": "number", "minimum": -1.0, "maximum": 1.0},
                "duration_s": _DURATION,
            },
            ["x", "y"],
        ),
    ]


def behavior_for(started: p.SessionStarted, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """The behavior a tool call asks for; ``ValueError`` says (to the LLM) what is wrong with it."""
    caps = started.capabilities
    duration = arguments.get("duration_s")
    extra = {"duration_s": float(duration)} if isinstance(duration, int | float) else {}
    if tool == "set_emotion":
        emotion = arguments.get("emotion")
        if emotion not in caps.emotions:
            raise ValueError(f"emotion must be one of {list(caps.emotions)}, got {emotion!r}")
        return {"kind": "emotion", "emotion": emotion, **extra}
    if tool == "do_action":
        action = arguments.get("action")
        if action not in caps.actions:
            raise ValueError(f"action must be one of {list(caps.actions)}, got {action!r}")
        return {"kind": "action", "name": action, **extra}
    if tool == "look_at":
        x, y = arguments.get("x"), arguments.get("y")
        if not all(isinstance(v, int | float) and -1.0 <= v <= 1.0 for v in (x, y)):
            raise ValueError(f"x and y must be numbers in [-1, 1], got {x!r} and {y!r}")
        return {"kind": "gaze", "x": float(x), "y": float(y), **extra}  # type: ignore[arg-type]
    raise ValueError(f"unknown tool {tool!r}")


def plan_with(base: dict[str, Any], behaviors: list[dict[str, Any]]) -> dict[str, Any]:
    """``base`` (its idle variety, places and triggers) playing ``behaviors`` now, as a plan for ``plan.run``."""
    kept = {k: v for k, v in base.items() if k in ("name", "idle", "places", "trigger")}
    return {**kept, "timeline": [{"at_s": 0.0, "behaviors": behaviors}]}
