"""The Director's character tools, generated from the capability manifest and the plan types.

perform, say, set_emotion, look_at, move_to, scene_event, set_scene, schedule_block, wait, remember. Action, emotion
and scene-event names are enums taken from the manifest, and numeric bounds come from its parameter specs,
so a retrained model with other capabilities changes the tools the LLM sees without touching this file:
``move_to`` is offered only to a model that can walk (``plans.WALKS``), and ``look_at``'s ``turn_head`` only
to one with a ``look_at`` action.
Each tool turns its arguments into a plan ``Block`` and hands it to the context's ``submit`` (the Director
stamps source, epoch and cause there); ``remember`` keeps a fact in the Director's memory.

Scene events are validated but nothing draws them yet (the chunk condition has no scene input), so
``scene_event`` is offered only when the caller says the scene is shown (``scene_shown``), and a
``schedule_block`` with scene events answers which of them are not shown (a block of nothing else is
refused): no tool tells the LLM "ok" for something the user will not see. ``set_scene`` (light, weather,
a door, a prop: the manifest's ``scene``, which a model draws and keeps) is offered only to a model whose
manifest has a scene.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

import msgspec

from agent.plans import (
    WALKS,
    Action,
    Behavior,
    Block,
    Composition,
    Emotion,
    Gaze,
    Move,
    PlanError,
    SceneEvent,
    SetScene,
    Speech,
    SyncRef,
    Wait,
    with_ids,
)
from agent.script import Place
from agent.tooling import ToolContext
from streaming_model.manifest import Manifest, ParamSpec
from tools.registry import Tool, ToolBox, ToolError

Unit = Annotated[float, msgspec.Meta(ge=-1.0, le=1.0)]
Seconds = Annotated[float, msgspec.Meta(gt=0.0, le=60.0, description="How long, in seconds.")]
Text = Annotated[str, msgspec.Meta(min_length=1, max_length=600)]

SAY_FIELDS = {"stroke.word": "on_word", "name": "gesture"}

MAX_MEMORY = 50
"""Facts kept by ``remember``; the oldest go first (the prompt must stay small)."""

MAX_BEHAVIORS = 32
"""Behaviors in one ``schedule_block`` (a huge block would only cost the realizer and the event loop)."""

SCENE_NOT_SHOWN = "the scene cannot change yet: scene events are not drawn"


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


def _literal(values: tuple[str, ...]) -> Any:
    return Literal[values]


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
        return Annotated[_literal(p.choices), msgspec.Meta(description=p.description)]
    return Annotated[float, msgspec.Meta(description=p.description, ge=p.minimum, le=p.maximum)]


def build_toolbox(
    manifest: Manifest, places: tuple[str, ...] = (), *, scene_shown: bool = False
) -> ToolBox[ToolContext]:
    """The character tools for ``manifest``; ``places`` are the scene's named spots (may be empty).
    ``scene_shown``: whether the backend draws the manifest's scene events (none does yet)."""
    names = tuple(a.name for a in manifest.actions)
    actions = _literal(names)
    can_walk = set(names).issuperset(WALKS)
    turns_head = "look_at" in names
    emotions = _literal(manifest.emotions)
    params = action_params(manifest)
    param_fields = [(p.name, _param_type(p) | None, None) for p in params]
    perform_fields = {f"params.{p.name}": p.name for p in params}
    place_type: Any = _literal(places) if places else str
    composition = Annotated[
        Composition,
        msgspec.Meta(
            description="merge: start now beside what runs; append: after your earlier plans on the same "
            "channels; replace: stop your earlier plans first."
        ),
    ]

    def args(name: str, fields: list[tuple[Any, ...]], doc: str) -> type[msgspec.Struct]:
        struct = msgspec.defstruct(name, fields, kw_only=True, forbid_unknown_fields=True)
        struct.__doc__ = doc
        return struct

    PerformArgs = args(
        "perform",
        [
            (
                "action",
                Annotated[
                    actions,
                    msgspec.Meta(
                        description="; ".join(f"{a.name}: {a.description}" for a in manifest.actions)
                    ),
                ],
            ),
            ("duration_s", Seconds | None, None),
            *param_fields,
            ("composition", composition, "merge"),
        ],
        "Perform an action.",
    )
    SayArgs = args(
        "say",
        [
            (
                "text",
                Annotated[Text, msgspec.Meta(description="What the character says, one or two sentences.")],
            ),
            ("emotion", emotions | None, None),
            (
                "gesture",
                Annotated[actions, msgspec.Meta(description="An action to perform while speaking.")] | None,
                None,
            ),
            (
                "on_word",
                Annotated[str, msgspec.Meta(description="A word of text on which the gesture peaks.")] | None,
                None,
            ),
            ("composition", composition, "append"),
        ],
        "Say something.",
    )
    EmotionArgs = args(
        "set_emotion",
        [("emotion", emotions), ("duration_s", Seconds | None, None)],
        "Show an emotion.",
    )
    LookArgs = args(
        "look_at",
        [
            (
                "x",
                Annotated[Unit, msgspec.Meta(description="-1 left .. 1 right; 0 is the user")] | None,
                None,
            ),
            ("y", Annotated[Unit, msgspec.Meta(description="-1 top .. 1 bottom")] | None, None),
            ("place", place_type | None, None),
            ("duration_s", Seconds, 2.0),
            *([("turn_head", bool, False)] if turns_head else []),
        ],
        "Look at a point or a place.",
    )
    MoveArgs = args(
        "move_to",
        [
            (
                "x",
                Annotated[Unit, msgspec.Meta(description="Floor position, -1 left .. 1 right")] | None,
                None,
            ),
            ("place", place_type | None, None),
            ("composition", composition, "append"),
        ],
        "Walk to a floor position or a place.",
    )
    SceneArgs = args("scene_event", [("name", _literal(manifest.scene_events))], "Trigger a scene event.")
    BlockArgs = args(
        "schedule_block",
        [
            ("behaviors", Annotated[list[Behavior], msgspec.Meta(min_length=1, max_length=MAX_BEHAVIORS)]),
            ("composition", composition, "merge"),
            ("priority", Annotated[int, msgspec.Meta(ge=0, le=10)], 0),
            ("label", str, ""),
            ("expires_s", Seconds | None, None),
        ],
        "Schedule a block of behaviors with sync points.",
    )
    scene_doc = "Change the scene; each part named keeps its choice until changed. " + "; ".join(
        f"{spec.name}: {spec.description}" for spec in manifest.scene
    )
    SetSceneArgs = args(
        "set_scene",
        [
            (
                spec.name,
                Annotated[_literal(spec.choices), msgspec.Meta(description=spec.description)] | None,
                None,
            )
            for spec in manifest.scene
        ],
        scene_doc,
    )
    WaitArgs = args("wait", [("seconds", Seconds)], "Wait before the next plans of this turn.")
    RememberArgs = args(
        "remember", [("fact", Annotated[str, msgspec.Meta(min_length=1, max_length=300)])], "Remember a fact."
    )

    def place_of(ctx: ToolContext, name: str | None) -> Place | None:
        if name is None:
            return None
        place = ctx.places.get(name)
        if place is None:
            raise ToolError(f"unknown place {name!r}; places: {sorted(ctx.places)}", "place")
        return place

    async def perform(a: Any, ctx: ToolContext) -> dict[str, Any]:
        given = {p.name: getattr(a, p.name) for p in params if getattr(a, p.name) is not None}
        action = Action(name=a.action, params=given, duration_s=a.duration_s)
        block = Block(behaviors=[action], composition=a.composition, label=f"perform {a.action}")
        return emit(ctx, block, perform_fields)

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

    async def set_emotion(a: Any, ctx: ToolContext) -> dict[str, Any]:
        emotion = Emotion(emotion=a.emotion, duration_s=a.duration_s or 4.0)
        return emit(ctx, Block(behaviors=[emotion], label=f"emotion {a.emotion}"))

    async def look_at(a: Any, ctx: ToolContext) -> dict[str, Any]:
        place = place_of(ctx, a.place)
        if place is None and a.x is None:
            raise ToolError("give x (and y) or a place", "x")
        x, y = place.gaze if place is not None else (a.x, a.y or 0.0)
        look: Behavior = Gaze(x=x, y=y, duration_s=a.duration_s)
        if turns_head and a.turn_head:
            look = Action(name="look_at", params={"target_x": x, "target_y": y}, duration_s=a.duration_s)
        return emit(ctx, Block(behaviors=[look], label="look"))

    async def move_to(a: Any, ctx: ToolContext) -> dict[str, Any]:
        place = place_of(ctx, a.place)
        if place is None and a.x is None:
            raise ToolError("give x or a place", "x")
        x = place.x if place is not None else a.x
        return emit(ctx, Block(behaviors=[Move(x=x)], composition=a.composition, label="move"))

    async def scene_event(a: Any, ctx: ToolContext) -> dict[str, Any]:
        return emit(ctx, Block(behaviors=[SceneEvent(name=a.name)], label=f"scene {a.name}"))

    async def set_scene(a: Any, ctx: ToolContext) -> dict[str, Any]:
        changes = {
            spec.name: getattr(a, spec.name) for spec in manifest.scene if getattr(a, spec.name) is not None
        }
        if not changes:
            raise ToolError("name at least one part of the scene to change", manifest.scene[0].name)
        label = "scene " + ", ".join(f"{part} {choice}" for part, choice in changes.items())
        return emit(ctx, Block(behaviors=[SetScene(changes=changes)], label=label))

    async def schedule_block(a: Any, ctx: ToolContext) -> dict[str, Any]:
        scene = [] if scene_shown else [b.name for b in a.behaviors if isinstance(b, SceneEvent)]
        if len(scene) == len(a.behaviors):
            raise ToolError(SCENE_NOT_SHOWN, "behaviors")
        block = Block(
            behaviors=a.behaviors,
            composition=a.composition,
            priority=a.priority,
            label=a.label,
            expires_s=a.expires_s,
        )
        result = emit(ctx, block)
        if scene:
            result["not_shown"] = {"scene": scene, "why": SCENE_NOT_SHOWN}
        return result

    async def wait(a: Any, ctx: ToolContext) -> dict[str, Any]:
        ctx.delay_s += a.seconds
        return {"delay_s": ctx.delay_s}

    async def remember(a: Any, ctx: ToolContext) -> dict[str, Any]:
        ctx.memory.append(a.fact)
        del ctx.memory[:-MAX_MEMORY]
        return {"facts": len(ctx.memory)}

    box: ToolBox[ToolContext] = ToolBox()
    box.register(Tool("perform", _doc_perform(manifest), PerformArgs, perform))
    box.register(
        Tool("say", "Say something aloud (optionally with a gesture peaking on a word).", SayArgs, say)
    )
    box.register(Tool("set_emotion", "Show an emotion on the face for a while.", EmotionArgs, set_emotion))
    box.register(Tool("look_at", "Look at a point on screen or a named place.", LookArgs, look_at))
    if can_walk:
        box.register(Tool("move_to", "Walk to a floor position or a named place.", MoveArgs, move_to))
    if scene_shown:
        box.register(Tool("scene_event", "Trigger a scene event.", SceneArgs, scene_event))
    if manifest.scene:
        box.register(Tool("set_scene", scene_doc, SetSceneArgs, set_scene))
    box.register(
        Tool(
            "schedule_block",
            "Schedule several behaviors together with sync points, e.g. a wave whose stroke lands on a word, "
            "or a walk that starts 2 s after speech ends.",
            BlockArgs,
            schedule_block,
        )
    )
    box.register(Tool("wait", "Delay the plans you make after this call in the same turn.", WaitArgs, wait))
    box.register(
        Tool("remember", "Remember a fact about the user or the conversation.", RememberArgs, remember)
    )
    return box


def _doc_perform(manifest: Manifest) -> str:
    cyclic = [a.name for a in manifest.actions if a.cyclic]
    return f"Perform a body action for a while ({', '.join(cyclic)} repeat while held)."
