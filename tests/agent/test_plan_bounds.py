"""Plan bounds as properties: any JSON value in any field of a plan (a script, a block, a client message)
gives a valid plan or a ``PlanError``, never another exception; a valid plan's chunks always decide a
condition the model takes; and the worst accepted plan's work per chunk is bounded, counted in function
calls (not timed), so these hold on a loaded machine too."""

from __future__ import annotations

import asyncio
import copy
import json
import sys
import tomllib
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from agent.bounds import (
    MAX_BEHAVIORS,
    MAX_JSON_DEPTH,
    MAX_LIVE_BEHAVIORS,
    MAX_LIVE_BLOCKS,
    largest_plan,
)
from agent.plan_io import block_from_builtins
from agent.plans import Block, Gaze, PlanError, Wait
from agent.realizer import Realizer
from agent.script import PLANS_DIR, Script, script_from_builtins
from agent.script_runner import ScriptRunner
from agent.story.format import STORIES_DIR, StoryError, story_from_builtins
from agent.story.graph import compile_story
from agent.tooling import ToolContext
from events.stamp import Stamper
from events.vocabulary import EndOfTurn, Gesture, SoundClass, SpeechStarted, TextInput
from server.protocol import ErrorCode, PlanRun, ProtocolError, decode_client_text, json_depth
from streaming_model.manifest import build_manifest
from tools.character import build_toolbox

MANIFEST = build_manifest()
CHUNKS = 60
"""Chunks each accepted plan is run for: ten seconds, past the first silence trigger of the base plan."""

# A plan with every part a plan may have: places, idle, a looping timeline with sync points, all triggers,
# its timeline squeezed into the chunks played so that every number in it is used.
BASE_PLAN: dict[str, Any] = tomllib.loads((PLANS_DIR / "living_room.toml").read_text()) | {"loop_s": 5.0}
for _i, _entry in enumerate(BASE_PLAN["timeline"]):
    _entry["at_s"] = 0.5 * _i
BASE_PLAN["trigger"].append(
    {"on": "text", "contains": "hi", "behaviors": [{"kind": "scene", "name": "shadow"}], "once": True}
)
# A block with every kind of behavior and every kind of sync point, as the Director or a story sends it.
BASE_BLOCK: dict[str, Any] = {
    "behaviors": [
        {"kind": "speech", "id": "hi", "text": "Oh, hello there!", "emotion": "happy"},
        {
            "kind": "action",
            "name": "wave",
            "params": {"paw": "left"},
            "stroke": {"to": "hi", "word": "hello"},
        },
        {"kind": "emotion", "emotion": "sad", "end": {"to": "hi", "point": "end"}},
        {"kind": "gaze", "x": 0.5, "y": -0.2, "duration_s": 2.0, "start": {"to": "hi", "point": "end"}},
        {"kind": "action", "name": "look_at", "params": {"target_x": 1.0}, "stroke_s": 0.5},
        {"kind": "move", "x": 0.8, "start": {"offset_s": 1.0}},
        {"kind": "scene", "name": "shadow"},
        {"kind": "wait", "id": "w", "duration_s": 1.0},
    ],
    "priority": 1,
    "expires_s": 5.0,
    "locks": ["scene"],
    "label": "everything",
}

DELETE = object()
"""Drawn instead of a value: remove the field (or list item) instead of replacing it."""

EDGE_NUMBERS = [1e308, -1e308, 1e-300, -1e300, 0.0, -0.0, 0.01, 1.0, 600.0, 600.5, 3600.0, 1e16, -1.0]
NUMBERS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(EDGE_NUMBERS),
    # Numbers a plan might really hold, so that many changed plans are still valid and get played.
    st.floats(min_value=-2.0, max_value=2.0),
    st.floats(min_value=-700.0, max_value=4000.0),
    st.integers(min_value=-3, max_value=20),
)
WORDS = [
    "wave",
    "happy",
    "window",
    "hi",
    "start",
    "stroke",
    "end",
    "gaze",
    "speech",
    "merge",
    "body",
    "Knock",
]
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, st.text(max_size=12), st.sampled_from(WORDS))
KEYS = st.one_of(st.text(max_size=8), st.sampled_from(["kind", "x", "to", "offset_s", "at_s", "id", "place"]))
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=12,
)
PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in ``value`` a value can be put: the root, every field and every list item."""
    found = [prefix]
    if isinstance(value, dict):
        for key, inner in value.items():
            found += paths(inner, (*prefix, key))
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            found += paths(inner, (*prefix, i))
    return found


def changed(data: Any, path: tuple[Any, ...], value: Any) -> Any:
    """A copy of ``data`` with ``value`` at ``path`` (or that field removed, for ``DELETE``)."""
    if not path:
        return None if value is DELETE else value
    data = copy.deepcopy(data)
    parent = data
    for key in path[:-1]:
        parent = parent[key]
    if value is DELETE:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return data


def played(realizer: Realizer, runner: ScriptRunner | None = None) -> None:
    """Run ``CHUNKS`` chunks with a few inputs on the way; every chunk's condition must be one the model
    takes."""
    stamp = Stamper("t")
    inputs = {
        5: stamp(Gesture, gesture="wave"),
        9: stamp(SoundClass, label="Knock", score=0.9, audio_ms=0.0),
        14: stamp(SpeechStarted, audio_ms=0.0),
        20: stamp(TextInput, text="hi there"),
        26: stamp(EndOfTurn, audio_ms=0.0, silence_ms=800.0, transcript="hello"),
    }
    for k in range(CHUNKS):
        out = realizer.tick(k)
        out.condition.validate()
        if runner is not None and k in inputs:
            runner.on_event(inputs[k])


def plan_or_error(data: Any) -> Script | None:
    """``data`` as a script, or None for a ``PlanError`` (with a field and a message); anything else raises."""
    try:
        return script_from_builtins(data, MANIFEST)
    except PlanError as exc:
        assert exc.field and exc.message
        return None


def run_script(script: Script) -> None:
    realizer = Realizer()
    runner = ScriptRunner(script, realizer)
    runner.attach()
    played(realizer, runner)


VALUES = st.one_of(st.just(DELETE), JSON, NUMBERS)


@PROPERTY
@given(path=st.sampled_from(paths(BASE_PLAN)), value=VALUES)
def test_any_value_in_any_plan_field_gives_a_plan_or_a_plan_error_and_plans_play(
    path: tuple[Any, ...], value: Any
) -> None:
    data = changed(BASE_PLAN, path, value)
    script = plan_or_error(data)
    event("plan accepted" if script is not None else "plan refused")
    if script is not None:
        run_script(script)
    # The same plan as a client sends it: a bad message is a protocol error, a good one the same plan.
    try:
        message = decode_client_text(json.dumps({"type": "plan.run", "plan": data}))
    except ProtocolError as exc:
        assert exc.code in (ErrorCode.BAD_JSON, ErrorCode.BAD_FIELD, ErrorCode.TOO_LARGE)
        return
    assert isinstance(message, PlanRun)
    again = plan_or_error(message.plan)
    assert (again is None) == (script is None) or not isinstance(data, dict) or _has_non_json(data)


def number_paths(value: Any) -> list[tuple[Any, ...]]:
    """The paths of ``value`` that hold a number (or a list of numbers, as ``idle.hold_s``)."""
    found = []
    for path in paths(value):
        inner = value
        for key in path:
            inner = inner[key]
        if isinstance(inner, int | float) and not isinstance(inner, bool):
            found.append(path)
    return found


@PROPERTY
@given(path=st.sampled_from(number_paths(BASE_PLAN) + number_paths(BASE_BLOCK)), value=NUMBERS)
def test_any_number_in_any_numeric_field_gives_a_plan_or_a_plan_error_and_plans_play(
    path: tuple[Any, ...], value: Any
) -> None:
    in_plan = path in number_paths(BASE_PLAN)
    data = changed(BASE_PLAN if in_plan else BASE_BLOCK, path, value)
    if in_plan:
        script = plan_or_error(data)
        event("plan accepted" if script is not None else "plan refused")
        if script is not None:
            run_script(script)
        return
    realizer = Realizer()
    try:
        realizer.submit(block_from_builtins(data))
    except PlanError:
        event("block refused")
        return
    event("block accepted")
    played(realizer)


EXTREMES = [1e308, -1e308, 1e-300, -1e300, float("inf"), float("nan"), 2**70]


@pytest.mark.parametrize("base", ["plan", "block"])
def test_every_numeric_field_with_every_extreme_gives_a_plan_or_a_plan_error_and_plans_play(
    base: str,
) -> None:
    data = BASE_PLAN if base == "plan" else BASE_BLOCK
    refused = 0
    for path in number_paths(data):
        for value in EXTREMES:
            changed_data = changed(data, path, value)
            if base == "plan":
                script = plan_or_error(changed_data)
                if script is None:
                    refused += 1
                else:
                    run_script(script)
                continue
            realizer = Realizer()
            try:
                realizer.submit(block_from_builtins(changed_data))
            except PlanError:
                refused += 1
                continue
            played(realizer)
    assert refused > 0


def _has_non_json(value: Any) -> bool:
    """Whether JSON text changes ``value`` (NaN and infinities are not JSON; msgspec reads them back
    differently than Python wrote them)."""
    if isinstance(value, float):
        return value != value or value in (float("inf"), float("-inf"))
    if isinstance(value, dict):
        return any(_has_non_json(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_non_json(v) for v in value)
    return False


@PROPERTY
@given(path=st.sampled_from(paths(BASE_BLOCK)), value=VALUES)
def test_any_value_in_any_block_field_gives_a_block_or_a_plan_error_and_blocks_play(
    path: tuple[Any, ...], value: Any
) -> None:
    data = changed(BASE_BLOCK, path, value)
    realizer = Realizer()
    try:
        realizer.submit(block_from_builtins(data))
    except PlanError as exc:
        assert exc.field and exc.message
        event("block refused")
        return
    event("block accepted")
    played(realizer)


@PROPERTY
@given(path=st.sampled_from(paths(BASE_PLAN)), depth=st.integers(min_value=0, max_value=3 * MAX_JSON_DEPTH))
def test_nesting_beyond_the_bound_is_bad_json_and_within_it_is_decoded(
    path: tuple[Any, ...], depth: int
) -> None:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    message = {"type": "plan.run", "plan": changed(BASE_PLAN, path, value)}
    deepest = len(path) + depth + 1  # the message, the fields on the way, the arrays
    try:
        decoded = decode_client_text(json.dumps(message))
    except ProtocolError as exc:
        # Too deep is bad JSON; within the bound, only the shape can be wrong (an array for the plan).
        assert (exc.code is ErrorCode.BAD_JSON) == (deepest > MAX_JSON_DEPTH)
        assert exc.code in (ErrorCode.BAD_JSON, ErrorCode.BAD_FIELD)
        return
    assert deepest <= MAX_JSON_DEPTH and isinstance(decoded, PlanRun)
    plan_or_error(decoded.plan)


def true_depth(value: Any) -> int:
    if isinstance(value, dict | list):
        inner = value.values() if isinstance(value, dict) else value
        return 1 + max((true_depth(v) for v in inner), default=0)
    return 0


TRICKY_TEXT = st.text(alphabet=st.sampled_from('[]{}"\\ab\n/'), max_size=10)
TRICKY = st.recursive(
    st.one_of(TRICKY_TEXT, st.integers(), st.none()),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TRICKY_TEXT, inner, max_size=3),
    max_leaves=20,
)


@PROPERTY
@given(value=TRICKY)
def test_the_depth_scan_counts_brackets_outside_strings_only(value: Any) -> None:
    assert json_depth(json.dumps(value).encode()) == true_depth(value)


# ------------------------------------------------------------------------- the other ways a plan comes in


def test_the_directors_tools_go_through_the_same_bounds() -> None:
    realizer = Realizer()
    ctx = ToolContext(submit=realizer.submit)
    far = {"kind": "gaze", "x": 0.1, "start": {"offset_s": 1e308}}
    result = asyncio.run(
        build_toolbox(MANIFEST).call("schedule_block", json.dumps({"behaviors": [far]}), ctx)
    )
    assert not result.ok and result.field == "behaviors[0].start.offset_s"
    assert not realizer.blocks()


def test_a_story_beats_inline_plan_goes_through_the_same_bounds() -> None:
    data = tomllib.loads((STORIES_DIR / "garden_gate.toml").read_text())
    data["beats"]["gate"]["plan"]["behaviors"][0]["start"] = {"offset_s": 1e308}
    with pytest.raises(StoryError) as caught:
        compile_story(story_from_builtins(data), MANIFEST)
    assert str(caught.value.problems[0]).startswith(
        "beats.gate.plan.behaviors[0].start.offset_s: must be at most"
    )


# ------------------------------------------------------------------------------------ work per chunk


def calls_per_tick(realizer: Realizer, ticks: range) -> list[Counter[str]]:
    """The Python functions each tick called, by name and count (the work of a chunk, machine-independent)."""
    counts: list[Counter[str]] = []
    for k in ticks:
        count: Counter[str] = Counter()

        def profile(frame: Any, event: str, arg: Any, count: Counter[str] = count) -> None:
            if event == "call":
                count[frame.f_code.co_qualname] += 1

        sys.setprofile(profile)
        try:
            realizer.tick(k)
        finally:
            sys.setprofile(None)
        counts.append(count)
    return counts


def test_the_worst_accepted_plan_keeps_a_chunks_work_bounded_however_long_it_loops() -> None:
    script = script_from_builtins(largest_plan(), MANIFEST)
    realizer = Realizer()
    runner = ScriptRunner(script, realizer)
    runner.attach()
    counts = []
    for k in range(300):  # 50 loops of the plan
        counts += calls_per_tick(realizer, range(k, k + 1))
        live = [e.block for e in realizer._entries]
        assert len(live) <= MAX_LIVE_BLOCKS and sum(len(b.behaviors) for b in live) <= MAX_LIVE_BEHAVIORS
        # One pass over the timeline at most: each entry is asked for at most once a chunk.
        assert counts[-1]["ScriptRunner._submit"] <= len(script.timeline)
    total = [sum(c.values()) for c in counts]
    # Work reaches its level within the first loops and stays there: nothing piles up from loop to loop.
    assert max(total[150:]) <= max(total[:150])


def held_blocks(realizer: Realizer, blocks: int, per_block: int) -> None:
    """``blocks`` blocks of a ten-minute wait and gazes that last until their block ends."""
    for _ in range(blocks):
        gazes = [Gaze(x=0.1) for _ in range(per_block - 1)]
        realizer.submit(Block(source="script", behaviors=[Wait(duration_s=600.0), *gazes]))


def test_a_chunks_work_grows_with_live_behaviors_not_with_the_size_of_their_blocks() -> None:
    small, large = Realizer(), Realizer()
    held_blocks(small, MAX_LIVE_BLOCKS, MAX_LIVE_BEHAVIORS // MAX_LIVE_BLOCKS)
    held_blocks(large, MAX_LIVE_BEHAVIORS // MAX_BEHAVIORS, MAX_BEHAVIORS)
    assert len(small.blocks()) > len(large.blocks())
    work = {
        name: max(sum(c.values()) for c in calls_per_tick(r, range(30))[5:])
        for name, r in (("small", small), ("large", large))
    }
    # The same live behaviors in fewer, larger blocks cost no more (a cost per behavior that grew with its
    # block, say a block's end worked out again for each behavior, would make the large blocks far dearer).
    assert work["large"] <= work["small"]
