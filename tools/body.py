"""The tools for what the character's body does: ``perform`` an action, ``say`` something (with a gesture),
``set_emotion`` on the face. Actions, their parameters and emotions are the manifest's."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from agent.plans import Action, Behavior, Block, Emotion, Speech, SyncRef
from agent.tooling import ToolContext
from streaming_model.manifest import Manifest, ParamSpec
from tools.arguments import CompositionArg, Seconds, Text, Vocabulary, args_struct, literal
from tools.emit import emit
from tools.registry import Tool, ToolError

SAY_FIELDS = {"stroke.word": "on_word", "name": "gesture"}


def body_tools(v: Vocabulary) -> list[Tool[Any, ToolContext]]:
    """``perform``, ``say`` and ``set_emotion`` for the manifest of ``v``."""
    return [_perform(v), _say(v), _set_emotion(v)]


def action_params(manifest: Manifest) -> list[ParamSpec]:
    """Every parameter any action takes, once each by name (perform offers them all, the plan checks
    that the chosen action has it)."""
    seen: dict[str, ParamSpec] = {}
    for action in manifest.actions:
        for p in action.params:
            seen.setdefault(p.name, p)
    return list(seen.values())


def _param_type(p: ParamSpec) -> Any:
    """The argument type of one manifest parameter: an enum of its choices, or a bounded number."""
    if p.kind == "choice":
        return Annotated[literal(p.choices), msgspec.Meta(description=p.description)]
    return Annotated[float, msgspec.Meta(description=p.description, ge=p.minimum, le=p.maximum)]


def _perform(v: Vocabulary) -> Tool[Any, ToolContext]:
    params = action_params(v.manifest)
    param_fields = [(p.name, _param_type(p) | None, None) for p in params]
    perform_fields = {f"params.{p.name}": p.name for p in params}
    described = "; ".join(f"{a.name}: {a.description}" for a in v.manifest.actions)
    PerformArgs = args_struct(
        "perform",
        [
            ("action", Annotated[v.actions, msgspec.Meta(description=described)]),
            ("duration_s", Seconds | None, None),
            *param_fields,
            ("composition", CompositionArg, "merge"),
        ],
        "Perform an action.",
    )

    async def perform(a: Any, ctx: ToolContext) -> dict[str, Any]:
        given = {p.name: getattr(a, p.name) for p in params if getattr(a, p.name) is not None}
        action = Action(name=a.action, params=given, duration_s=a.duration_s)
        block = Block(behaviors=[action], composition=a.composition, label=f"perform {a.action}")
        return emit(ctx, block, perform_fields)

    return Tool("perform", _doc_perform(v.manifest), PerformArgs, perform)


def _doc_perform(manifest: Manifest) -> str:
    cyclic = [a.name for a in manifest.actions if a.cyclic]
    return f"Perform a body action for a while ({', '.join(cyclic)} repeat while held)."


def _say(v: Vocabulary) -> Tool[Any, ToolContext]:
    SayArgs = args_struct(
        "say",
        [
            (
                "text",
                Annotated[Text, msgspec.Meta(description="What the character says, one or two sentences.")],
            ),
            ("emotion", v.emotions | None, None),
            (
                "gesture",
                Annotated[v.actions, msgspec.Meta(description="An action to perform while speaking.")] | None,
                None,
            ),
            (
                "on_word",
                Annotated[str, msgspec.Meta(description="A word of text on which the gesture peaks.")] | None,
                None,
            ),
            ("composition", CompositionArg, "append"),
        ],
        "Say something.",
    )

    async def say(a: Any, ctx: ToolContext) -> dict[str, Any]:
        behaviors: list[Behavior] = [Speech(id="say", text=a.text, emotion=a.emotion)]
        if a.on_word is not None and a.gesture is None:
            raise ToolError("on_word needs a gesture", "on_word")
        if a.gesture is not None:
            when: dict[str, Any] = (
                {"stroke": SyncRef(to="say", word=a.on_word)} if a.on_word else {"start": SyncRef(to="say")}
            )
            behaviors.append(Action(id="gesture", name=a.gesture, **when))
        return emit(ctx, Block(behaviors=behaviors, composition=a.composition, label="say"), SAY_FIELDS)

    return Tool("say", "Say something aloud (optionally with a gesture peaking on a word).", SayArgs, say)


def _set_emotion(v: Vocabulary) -> Tool[Any, ToolContext]:
    EmotionArgs = args_struct(
        "set_emotion",
        [("emotion", v.emotions), ("duration_s", Seconds | None, None)],
        "Show an emotion.",
    )

    async def set_emotion(a: Any, ctx: ToolContext) -> dict[str, Any]:
        emotion = Emotion(emotion=a.emotion, duration_s=a.duration_s or 4.0)
        return emit(ctx, Block(behaviors=[emotion], label=f"emotion {a.emotion}"))

    return Tool("set_emotion", "Show an emotion on the face for a while.", EmotionArgs, set_emotion)
