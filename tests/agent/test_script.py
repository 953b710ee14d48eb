"""Scripted plans: loading and validation, the timeline on the frame clock, triggers fired by real events."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import numpy as np
import pytest

from agent.plans import Move
from agent.progress import BlockStarted
from agent.realizer import ChunkOutput, Realizer
from agent.script import (
    PLANS_DIR,
    ScriptError,
    load_script,
    load_script_file,
    script_from_builtins,
)
from agent.script_runner import ScriptRunner
from events.bus import EventBus
from events.stamp import Stamper
from events.vocabulary import EndOfTurn, Event, Gesture, SoundClass, SpeechStarted, SpeechStopped, TextInput
from streaming_model.condition import ChunkCondition
from streaming_model.manifest import build_manifest
from streaming_model.probes import Measures, measure
from streaming_model.render import world_frames
from streaming_model.scene_probes import measure_scene, weather_shown
from tests.agent.frames import generated

MANIFEST = build_manifest()
SCENE_PLANS = {"doorstep"}
"""Example plans that change the scene (they need a model that draws one)."""
CHUNK_S = MANIFEST.chunk_s


def chunk_of(seconds: float) -> int:
    return round(seconds / CHUNK_S)


async def play(
    realizer: Realizer, bus: EventBus, chunks: int, inputs: dict[int, list[Event]]
) -> list[ChunkOutput]:
    """Tick the realizer through ``chunks``, publishing each chunk's input events on the bus first."""
    outs = []
    for k in range(chunks):
        for event in inputs.get(k, []):
            await bus.publish(event)
        if k in inputs:
            for _ in range(3):  # let the script's subscription read what was just published
                await asyncio.sleep(0)
        outs.append(realizer.tick(k))
    return outs


@pytest.mark.parametrize("name", sorted(p.stem for p in PLANS_DIR.glob("*.toml")))
def test_every_example_plan_loads_and_validates(name: str) -> None:
    # A plan that changes the scene needs a model that draws one (the world backend's vocabulary).
    script = load_script(name, build_manifest(scene=True) if name in SCENE_PLANS else MANIFEST)
    assert script.name == name
    assert script.timeline or script.trigger


def test_a_plan_loads_from_a_file_too(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text(
        'name = "mine"\n[[timeline]]\nat_s = 0\nbehaviors = [{ kind = "action", name = "nod" }]\n'
    )
    assert load_script_file(path, MANIFEST).timeline[0].at_s == 0


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (
            {"name": "x", "timeline": [{"at_s": 0, "behaviors": [{"kind": "action", "name": "fly"}]}]},
            "timeline[0].behaviors[0].name",
        ),
        ({"name": "x", "trigger": [{"on": "smell", "behaviors": []}]}, "trigger[0].on"),
        (
            {
                "name": "x",
                "trigger": [
                    {"on": "silence", "after_s": -1, "behaviors": [{"kind": "action", "name": "nod"}]}
                ],
            },
            "trigger[0].after_s",
        ),
        (
            {"name": "x", "timeline": [{"at_s": 0, "behaviors": [{"kind": "move", "place": "moon"}]}]},
            "timeline[0].behaviors[0].place",
        ),
        ({"name": "x", "colour": "red"}, "colour"),
        ({"name": "x", "places": {"door": {"x": 0.5, "gaze": "left"}}}, "places.door.gaze"),
        ({"name": "x", "places": []}, "places"),
        ([1, 2], "$"),
        ({"name": "x", "idle": {"actions": ["nod", "fly"]}}, "idle.actions[1]"),
    ],
)
def test_a_bad_script_is_rejected_naming_the_field(data: object, field: str) -> None:
    with pytest.raises(ScriptError) as caught:
        script_from_builtins(data, MANIFEST)
    assert caught.value.field == field


def test_an_unknown_plan_name_lists_the_known_ones() -> None:
    with pytest.raises(ScriptError, match="living_room"):
        load_script("no_such_plan", MANIFEST)
    with pytest.raises(ScriptError, match="letters, digits"):
        load_script("../../etc/passwd", MANIFEST)
    with pytest.raises(ScriptError, match="not valid TOML"):
        load_script_file(Path(__file__), MANIFEST)


def test_places_become_coordinates() -> None:
    script = load_script("living_room", MANIFEST)
    walk = next(t for t in script.trigger if t.name == "walk to the window")
    move = walk.behaviors[0]
    assert isinstance(move, Move) and move.x == script.places["window"].x


async def test_the_two_minute_scene_fires_every_trigger_and_shows_it_in_the_frames() -> None:
    bus = EventBus()
    progress = bus.subscribe(BlockStarted)
    realizer = Realizer(bus)
    runner = ScriptRunner(load_script("living_room", MANIFEST), realizer)
    runner.attach()
    task = runner.listen(bus)
    stamp = Stamper("s1")
    wave = stamp(Gesture, gesture="wave", confidence=0.9)
    knock = stamp(SoundClass, audio_ms=20_000.0, label="Knock", score=0.8)
    speech = stamp(SpeechStarted, audio_ms=50_000.0)
    inputs: dict[int, list[Event]] = {
        chunk_of(5.0): [wave],
        chunk_of(6.0): [stamp(Gesture, gesture="wave", confidence=0.9)],  # within the cooldown: ignored
        chunk_of(20.0): [knock],
        chunk_of(50.0): [speech],
        chunk_of(52.0): [stamp(SpeechStopped, audio_ms=52_000.0, duration_ms=2000.0)],
        chunk_of(53.0): [stamp(EndOfTurn, audio_ms=52_000.0, silence_ms=800.0, transcript="hi")],
    }
    outs = await play(realizer, bus, chunk_of(120.0), inputs)
    bus.close()
    await task

    fired = {f.name: f for f in runner.fired}
    assert {"wave back", "walk to the window", "who is there", "attentive"} <= set(fired)
    assert [f.cause for f in runner.fired if f.name == "wave back"] == [wave.id]
    assert fired["who is there"].cause == knock.id
    assert fired["attentive"].cause == speech.id
    labels = []
    while (event := progress.get_nowait()) is not None:
        assert isinstance(event, BlockStarted)
        labels.append(event.label)
    for entry in (
        "greeting",
        "look outside",
        "stretch",
        "sit down",
        "pace",
        "question",
        "turn around",
        "goodbye",
    ):
        assert entry in labels
    # Silence: 8 s after the last input (the ignored second wave still counts as the user doing something).
    silences = [f.chunk for f in runner.fired if f.name == "walk to the window"]
    assert silences[0] == chunk_of(6.0) + chunk_of(8.0)
    for o in outs:
        o.condition.validate()  # raises on a condition the model cannot take
    assert next(o for o in outs if o.reflects == (knock.id,)).chunk == chunk_of(20.0)

    # The shipped generator draws each reaction (from 3 chunks before it) and the probes read the frames.
    def after(chunk: int, count: int) -> Measures:
        return generated([o.condition for o in outs[chunk - 3 : chunk + count]], seed=chunk, skip=3)

    waved = after(fired["wave back"].chunk, 10)
    assert waved.paw_left[-12:].mean() > 0.75 and not waved.paw_right[-12:].any()
    knocked = after(fired["who is there"].chunk, 12)
    assert knocked.mouth.max() > 0.2  # "Who is there?" is spoken
    assert np.nanmean(knocked.facing[-16:]) > 0.1  # the head turned toward the door (screen right)
    attentive = [o.condition for o in outs[fired["attentive"].chunk : fired["attentive"].chunk + 9]]
    assert all(c.gaze == (0.0, 0.0) and c.action == "idle" for c in attentive)  # still, eyes on the user
    calm = after(fired["attentive"].chunk, 9)
    assert not (calm.paw_left.any() or calm.paw_right.any() or calm.jumping.any())
    walked = after(silences[0], 12)
    assert walked.x[-1] < walked.x[0] - 10  # walking left, to the window


async def test_without_input_the_scene_keeps_moving_and_walks_to_the_window() -> None:
    bus = EventBus()
    realizer = Realizer(bus)
    runner = ScriptRunner(load_script("living_room", MANIFEST), realizer)
    runner.attach()
    outs = await play(realizer, bus, chunk_of(60.0), {})
    conditions = [o.condition for o in outs]
    frozen = longest_repeat(conditions)
    assert frozen * CHUNK_S <= 3.0  # idle variety: the eyes and body never rest long
    # One silence is one walk: the trigger rearms only when the user does something.
    assert [f.chunk for f in runner.fired if f.name == "walk to the window"] == [chunk_of(8.0)]


def longest_repeat(conditions: list[ChunkCondition]) -> int:
    best = run = 1
    for a, b in itertools.pairwise(conditions):
        run = run + 1 if a == b else 1
        best = max(best, run)
    return best


async def test_a_once_trigger_fires_once_and_cooldowns_hold() -> None:
    script = script_from_builtins(
        {
            "name": "t",
            "trigger": [
                {
                    "on": "gesture",
                    "gesture": "point",
                    "once": True,
                    "behaviors": [{"kind": "action", "name": "nod"}],
                },
                {
                    "on": "text",
                    "contains": "hello",
                    "cooldown_s": 1.0,
                    "behaviors": [{"kind": "action", "name": "wave"}],
                },
            ],
        },
        MANIFEST,
    )
    realizer = Realizer()
    runner = ScriptRunner(script, realizer)
    runner.attach()
    stamp = Stamper("s")
    realizer.tick(0)
    assert runner.on_event(stamp(Gesture, gesture="point"))
    assert not runner.on_event(stamp(Gesture, gesture="point"))
    assert runner.on_event(stamp(TextInput, text="Hello!"))
    assert not runner.on_event(stamp(TextInput, text="hello again"))
    for k in range(1, 8):
        realizer.tick(k)
    assert runner.on_event(stamp(TextInput, text="oh hello"))
    assert not runner.on_event(stamp(TextInput, text="bye"))


def test_a_looping_timeline_repeats() -> None:
    script = script_from_builtins(
        {
            "name": "t",
            "loop_s": 2.0,
            "timeline": [{"at_s": 0.5, "behaviors": [{"kind": "action", "name": "nod"}]}],
        },
        MANIFEST,
    )
    realizer = Realizer()
    runner = ScriptRunner(script, realizer)
    runner.attach()
    for k in range(chunk_of(7.0)):
        realizer.tick(k)
    assert [f.chunk for f in runner.fired] == [chunk_of(0.5), chunk_of(2.5), chunk_of(4.5), chunk_of(6.5)]


def test_a_detached_script_stops_following_the_clock() -> None:
    script = script_from_builtins(
        {
            "name": "t",
            "timeline": [{"at_s": t, "behaviors": [{"kind": "action", "name": "nod"}]} for t in (0, 2)],
        },
        MANIFEST,
    )
    realizer = Realizer()
    runner = ScriptRunner(script, realizer)
    runner.attach()
    realizer.tick(0)
    runner.detach()
    for k in range(1, chunk_of(3.0)):
        realizer.tick(k)
    assert [f.chunk for f in runner.fired] == [0]


async def test_a_knock_turns_the_character_to_the_door_and_silence_has_it_opened() -> None:
    world = build_manifest(scene=True)
    bus = EventBus()
    realizer = Realizer(bus, manifest=world)
    runner = ScriptRunner(load_script("doorstep", world), realizer)
    runner.attach()
    task = runner.listen(bus)
    knock = Stamper("s1")(SoundClass, audio_ms=5_000.0, label="Knock", score=0.8)
    outs = await play(realizer, bus, chunk_of(24.0), {chunk_of(5.0): [knock]})
    bus.close()
    await task
    fired = {f.name: f.chunk for f in runner.fired}
    assert fired["look at the door"] == chunk_of(5.0)
    assert fired["open the door"] == chunk_of(10.0)  # ten seconds without the user (a knock is no word)
    # The procedural world draws them: the head turns to the door, then the door opens and stays open.
    frames = world_frames([o.condition for o in outs], identity=0)
    looked = measure(frames[4 * chunk_of(6.0) : 4 * chunk_of(7.0)], 0)
    assert np.nanmean(looked.facing) > 0.3
    scene = measure_scene(frames)
    assert (weather_shown(scene)[4 * chunk_of(3.0) :] == 1).all()  # the rain set in and stays
    assert scene.door_shown[-1] and scene.door_open[4 * chunk_of(9.0)] < 0.1 and scene.door_open[-1] > 0.9
