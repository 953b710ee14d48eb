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

This module assembles the tool box; each family of tools lives in its own module: ``tools.body``
(perform, say, set_emotion), ``tools.places`` (look_at, move_to), ``tools.scene``, ``tools.schedule``
(schedule_block, wait) and ``tools.memory`` (remember), on ``tools.arguments`` and ``tools.emit``.
"""

from __future__ import annotations

from agent.tooling import ToolContext
from streaming_model.manifest import Manifest
from tools.arguments import Vocabulary
from tools.body import body_tools
from tools.memory import remember_tool
from tools.places import place_tools
from tools.registry import ToolBox
from tools.scene import scene_tools
from tools.schedule import schedule_tools


def build_toolbox(
    manifest: Manifest, places: tuple[str, ...] = (), *, scene_shown: bool = False
) -> ToolBox[ToolContext]:
    """The character tools for ``manifest``; ``places`` are the scene's named spots (may be empty).
    ``scene_shown``: whether the backend draws the manifest's scene events (none does yet)."""
    v = Vocabulary.of(manifest, places)
    box: ToolBox[ToolContext] = ToolBox()
    for tool in (
        *body_tools(v),
        *place_tools(v),
        *scene_tools(manifest, scene_shown),
        *schedule_tools(scene_shown),
        remember_tool(),
    ):
        box.register(tool)
    return box
