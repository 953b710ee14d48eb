"""The bounds of what one plan may hold and cost, in one place: every plan, block and client message is
checked against them before it reaches the realizer's clock.

A plan comes from a client (``plan.run``, ``session.start``), an LLM (the Director's tools), a story beat or
a file, and each of its numbers ends up in per-chunk arithmetic on the shared event loop. The bounds are
far beyond what a real plan uses (``examples/plans/*.toml``: blocks of two or three behaviors, eight
timeline entries, a two-minute scene, 60 s loops) and tight enough that no plan can make a chunk's decision
slow, overflow a conversion to chunks, or grow the realizer's work without end. A value beyond one is a
``PlanError`` naming the field (protocol ``bad_field``), never an error of the session.
"""

from __future__ import annotations

import re
from typing import Any

MAX_BEHAVIORS = 64
"""Behaviors in one block."""

MAX_SPEECH_CHARS = 2000
"""Characters of one speech behavior (about two minutes of speech)."""

MAX_DURATION_S = 600.0
"""Longest duration of one behavior (action, emotion, gaze, wait), in seconds."""

MAX_OFFSET_S = 600.0
"""Largest offset of a sync point from what it refers to, either way, in seconds."""

MAX_BLOCK_S = 1200.0
"""Longest a block may last once its sync points are resolved, in seconds."""

MAX_PLAN_S = 3600.0
"""Largest time a scripted plan may name: a timeline entry's ``at_s``, ``loop_s``, ``duration_s``, a
trigger's ``cooldown_s`` and ``after_s``, a block's ``expires_s``, in seconds."""

MIN_LOOP_S = 1.0
"""Shortest ``loop_s`` of a looping timeline (and every entry's ``at_s`` must fall inside the loop): one
loop then spans several chunks, so a chunk starts each entry at most once."""

MAX_SCRIPT_BEHAVIORS = 256
"""Behaviors in one scripted plan, its timeline and triggers together (so also at most this many entries)."""

MAX_PLACES = 32
"""Named places in one scripted plan."""

MAX_IDLE_ACTIONS = 32
"""Entries of a plan's ``idle.actions``."""

MAX_IDLE_S = 600.0
"""Longest interval an ``[idle]`` table may name (``every_s``, ``hold_s``, ``gaze_every_s``), in seconds."""

MAX_PRIORITY = 1000
"""Largest ``priority`` of a block, either way."""

MAX_LIVE_BLOCKS = 16
"""Blocks of one source that the realizer keeps waiting or running at once; a block beyond is refused
(``Submission.accepted`` false): a looping plan or a busy LLM cannot pile up work for every chunk."""

MAX_LIVE_BEHAVIORS = 128
"""Behaviors of one source's waiting and running blocks together, refused beyond like ``MAX_LIVE_BLOCKS``:
the realizer looks at every live behavior in every chunk, so this is what bounds a chunk's decision."""

MAX_FIRED_KEPT = 256
"""Firings a script runner remembers (the newest), so that a long looping session holds no growing list."""

MAX_NAME_CHARS = 64
"""Characters of a plan's name as a client sends it."""

NAME_PATTERN = re.compile(rf"[A-Za-z0-9_-]{{1,{MAX_NAME_CHARS}}}")
"""A plan name a client may send (use ``fullmatch``): checked before the name touches the file system."""

MAX_JSON_DEPTH = 32
"""Deepest nesting of arrays and objects in a client's text message (a real plan nests about 8 deep);
deeper messages are refused before they are decoded."""


def largest_plan(behaviors: int = MAX_SCRIPT_BEHAVIORS) -> dict[str, Any]:
    """A looping plan (as ``plan.run`` carries it) of ``behaviors`` ten-minute gazes in timeline entries of
    ``MAX_BEHAVIORS``, all starting in the first second of a ``MIN_LOOP_S`` loop: every loop asks for all of
    them again. With the default it is the costliest plan these bounds accept for the realizer's chunks; with
    960 it is the flood of issue 12 (a 58 KB message), which they refuse. Benchmarks and tests measure it."""
    entries = -(-behaviors // MAX_BEHAVIORS)
    timeline = []
    for i in range(entries):
        n = min(MAX_BEHAVIORS, behaviors - i * MAX_BEHAVIORS)
        gaze = {"kind": "gaze", "x": 0.5, "y": -0.5, "duration_s": MAX_DURATION_S}
        timeline.append({"at_s": round(i * MIN_LOOP_S / (entries + 1), 3), "behaviors": [gaze] * n})
    return {"name": "largest", "loop_s": MIN_LOOP_S, "timeline": timeline}
