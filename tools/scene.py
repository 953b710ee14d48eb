"""The tools that change the scene: ``scene_event`` (only where the backend draws scene events, which none
does yet) and ``set_scene`` (light, weather, a door, a prop: only for a manifest with a ``scene``)."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from agent.plans import Block, SceneEvent, SetScene
from agent.tooling import ToolContext
from streaming_model.manifest import Manifest
from tools.arguments import args_struct, literal
from tools.emit import emit
from tools.registry import Tool, ToolError


def scene_tools(manifest: Manifest, scene_shown: bool) -> list[Tool[Any, ToolContext]]:
    """``scene_event`` if the scene events are drawn (``scene_shown``), ``set_scene`` if ``manifest``
    has a scene."""
    return [
        *([_scene_event(manifest)] if scene_shown else []),
        *([_set_scene(manifest)] if manifest.scene else []),
    ]


def _scene_event(manifest: Manifest) -> Tool[Any, ToolContext]:
    SceneArgs = args_struct(
        "scene_event", [("name", literal(manifest.scene_events))], "Trigger a scene event."
    )

    async def scene_event(a: Any, ctx: ToolContext) -> dict[str, Any]:
        return emit(ctx, Block(behaviors=[SceneEvent(name=a.name)], label=f"scene {a.name}"))

    return Tool("scene_event", "Trigger a scene event.", SceneArgs, scene_event)


def _set_scene(manifest: Manifest) -> Tool[Any, ToolContext]:
    scene_doc = "Change the scene; each part named keeps its choice until changed. " + "; ".join(
        f"{spec.name}: {spec.description}" for spec in manifest.scene
    )
    SetSceneArgs = args_struct(
        "set_scene",
        [
            (
                spec.name,
                Annotated[literal(spec.choices), msgspec.Meta(description=spec.description)] | None,
                None,
            )
            for spec in manifest.scene
        ],
        scene_doc,
    )

    async def set_scene(a: Any, ctx: ToolContext) -> dict[str, Any]:
        changes = {
            spec.name: getattr(a, spec.name) for spec in manifest.scene if getattr(a, spec.name) is not None
        }
        if not changes:
            raise ToolError("name at least one part of the scene to change", manifest.scene[0].name)
        label = "scene " + ", ".join(f"{part} {choice}" for part, choice in changes.items())
        return emit(ctx, Block(behaviors=[SetScene(changes=changes)], label=label))

    return Tool("set_scene", scene_doc, SetSceneArgs, set_scene)
