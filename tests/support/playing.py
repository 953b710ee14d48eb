"""Playing a plan as ``plan.run`` would, on a real realizer, without a server (light to import: a child
process of a test can run it under a timeout)."""

from __future__ import annotations

import json
from typing import Any

from agent.realizer import Realizer
from agent.script import script_from_builtins
from agent.script_runner import ScriptRunner
from streaming_model.manifest import build_manifest


def play_plan(plan: Any, ticks: int = 30) -> None:
    """Load ``plan`` as ``plan.run`` does (``ScriptError`` if refused) and play it on a real realizer for
    ``ticks`` chunks."""
    manifest = build_manifest()
    script = script_from_builtins(json.loads(json.dumps(plan)), manifest)
    realizer = Realizer(manifest=manifest)
    ScriptRunner(script, realizer).attach()
    for k in range(ticks):
        realizer.tick(k)
