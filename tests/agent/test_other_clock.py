"""The minds on another model's clock and vocabulary: everything in seconds lands on that manifest's chunks.

The manifest here is the procedural world's vocabulary at 16 fps with 12-frame chunks (0.75 s each), the
clock the ``world`` backend serves; a second one lacks some of the world's actions. Each test checks a
timing or a choice that differs from what the default clock (24 fps, 4 frames: 1/6 s) would give.
"""

from __future__ import annotations

import msgspec
import pytest

from agent.idle import IdleConfig, IdleVariety
from agent.plan_checks import validate_block
from agent.plans import Action, Block, Emotion, Move, PlanError, Speech, SyncRef
from agent.progress import StrokeReached
from agent.realizer import ChunkOutput, Realizer
from agent.reflex import ReflexPolicy
from agent.script import script_from_builtins
from agent.script_runner import ScriptRunner
from events.bus import EventBus
from events.stamp import Stamper
from events.vocabulary import Gesture, SoundClass, SoundOnset
from streaming_model.backend import BackendManifest, Capabilities, Costs, apply_fallbacks
from streaming_model.condition import ChunkCondition, ConditionError
from streaming_model.manifest import Manifest, build_manifest
from tools.character import build_toolbox

SLOW = build_manifest(fps=16, frames_per_chunk=12, width=160, height=96)
DEFAULT = build_manifest()
stamp = Stamper("s", prefix="u")


def lacking(*names: str) -> Manifest:
    """The slow clock's manifest without the actions ``names`` (a model that cannot do them)."""
    return msgspec.structs.replace(SLOW, actions=tuple(a for a in SLOW.actions if a.name not in names))


def quiet(manifest: Manifest, bus: EventBus | None = None) -> Realizer:
    return Realizer(bus, manifest=manifest, idle=IdleVariety(IdleConfig(actions=())))


def run(realizer: Realizer, count: int) -> list[ChunkOutput]:
    start = realizer.chunk + 1
    return [realizer.tick(k) for k in range(start, start + count)]


def test_a_condition_holds_one_envelope_value_per_frame_of_the_manifest_it_is_checked_against() -> None:
    out = run(quiet(SLOW), 1)[0]
    assert len(out.condition.audio) == SLOW.frames_per_chunk
    out.condition.validate(SLOW)
    with pytest.raises(ConditionError, match="audio must hold 4 values"):
        out.condition.validate(DEFAULT)
    with pytest.raises(ConditionError, match="unknown action 'wave'"):
        ChunkCondition("wave", audio=(0.0,) * 12).validate(lacking("wave"))
    ChunkCondition("wave").validate()  # the tiny model validates against its own manifest


def test_a_block_starts_ends_and_strokes_on_the_slow_clock() -> None:
    bus = EventBus()
    strokes = bus.subscribe(StrokeReached)
    realizer = quiet(SLOW, bus)
    wave = Action(id="w", name="wave", duration_s=3.0, stroke_s=1.5, start=SyncRef(offset_s=1.5))
    realizer.submit(Block(behaviors=[wave]))
    actions = [o.condition.action for o in run(realizer, 8)]
    # 1.5 s in = chunk 2 of 0.75 s; 3 s long = 4 chunks; the stroke 1.5 s after its start = chunk 4.
    assert actions == ["idle", "idle", "wave", "wave", "wave", "wave", "idle", "idle"]
    stroke = strokes.get_nowait()
    assert isinstance(stroke, StrokeReached) and stroke.chunk == 4


def test_a_gesture_on_a_word_and_the_speech_last_where_the_voice_says_on_the_slow_clock() -> None:
    realizer = quiet(SLOW)
    block = Block(
        behaviors=[
            Speech(id="s", text="Well hello there, my friend."),
            Action(id="w", name="wave", duration_s=1.5, stroke=SyncRef(to="s", word="friend")),
        ]
    )
    realizer.submit(block)
    first = run(realizer, 1)[0]
    (cue,) = first.speech_start
    # The voice reports a 3 s utterance starting with the cue's chunk, its envelope frame by frame at 16 fps.
    realizer.speech_audio(cue.speech_id, [0.5] * 48)
    realizer.speech_started(cue.speech_id, 3.0)
    outs = [first, *run(realizer, 7)]
    assert [len(o.condition.audio) for o in outs] == [12] * 8
    assert [o.condition.speaking for o in outs] == [True] * 4 + [False] * 4  # 3 s = 4 chunks of 0.75 s
    assert outs[1].condition.audio == (0.5,) * 12
    waving = [o.chunk for o in outs if o.condition.action == "wave"]
    # "friend" is said 2.17 s in; the wave's stroke is 40 % into its 1.5 s, so it starts at 1.57 s: chunk 2,
    # for 2 chunks (on the default clock it would start in chunk 9, for 9 chunks).
    assert waving == [2, 3]


def test_the_estimated_mouth_opens_and_closes_at_four_syllables_a_second_of_the_manifests_frames() -> None:
    realizer = quiet(SLOW)
    realizer.submit(Block(behaviors=[Speech(text="A few words to say out loud.")]))
    audio = run(realizer, 1)[0].condition.audio
    assert len(audio) == 12
    # 4 syllables a second at 16 fps: a whole cycle every 4 frames.
    assert audio[:4] == pytest.approx(audio[4:8], abs=1e-3) and audio[0] != pytest.approx(audio[2], abs=0.1)


def test_plan_validation_takes_the_shortest_duration_from_the_manifests_chunk() -> None:
    block = Block(behaviors=[Action(name="nod", duration_s=0.3)])
    validate_block(block, DEFAULT)
    with pytest.raises(PlanError, match=r"at least 0\.375"):
        validate_block(block, SLOW)


def test_a_move_is_refused_by_a_model_that_cannot_walk_and_its_tools_offer_no_walking() -> None:
    with pytest.raises(PlanError, match="cannot walk") as err:
        validate_block(Block(behaviors=[Move(x=0.5)]), lacking("walk_left"))
    assert err.value.field == "behaviors[0].kind"
    names = [s["function"]["name"] for s in build_toolbox(lacking("walk_left")).schemas()]
    assert "move_to" not in names and "perform" in names
    assert "move_to" in [s["function"]["name"] for s in build_toolbox(SLOW).schemas()]


def test_the_directors_tools_offer_only_the_manifests_actions() -> None:
    manifest = lacking("wave", "look_at", "jump")
    schemas = {s["function"]["name"]: s["function"]["parameters"] for s in build_toolbox(manifest).schemas()}
    perform = schemas["perform"]["properties"]["action"]
    say_gesture = schemas["say"]["properties"]["gesture"]
    offered = sorted(a.name for a in manifest.actions)
    for schema in (perform, say_gesture):
        enums = _enums(schema)
        assert len(enums) == 1 and sorted(enums[0]) == offered
    assert "turn_head" not in schemas["look_at"]["properties"]
    assert "turn_head" in build_toolbox(SLOW).schemas()[3]["function"]["parameters"]["properties"]


def _enums(schema: object) -> list[list[str]]:
    if isinstance(schema, dict):
        found = [schema["enum"]] if "enum" in schema else []
        return found + [e for v in schema.values() for e in _enums(v)]
    if isinstance(schema, list):
        return [e for v in schema for e in _enums(v)]
    return []


def test_reflex_cooldowns_are_seconds_on_the_slow_clock() -> None:
    realizer = quiet(SLOW)
    reflex = ReflexPolicy(realizer)  # the startle cools down for 2 s
    assert reflex.on_event(stamp(SoundOnset, audio_ms=0.0, strength_db=25.0)) is not None
    run(realizer, 2)  # 1.5 s later: still cooling (on the default clock, 2 chunks would be 0.33 s)
    assert reflex.on_event(stamp(SoundOnset, audio_ms=1500.0, strength_db=25.0)) is None
    run(realizer, 1)  # 2.25 s
    assert reflex.on_event(stamp(SoundOnset, audio_ms=2250.0, strength_db=25.0)) is not None


def test_a_reflex_does_without_what_the_model_lacks() -> None:
    realizer = quiet(lacking("wave", "look_at", "startle"))
    reflex = ReflexPolicy(realizer)
    wave = stamp(Gesture, gesture="wave")
    assert reflex.on_event(wave) is not None
    out = run(realizer, 1)[0]
    assert out.condition.action == "idle" and out.condition.emotion == "happy" and out.reflects == (wave.id,)
    knock = stamp(SoundClass, audio_ms=100.0, label="Knock", score=0.9)
    assert reflex.on_event(knock) is not None
    out = run(realizer, 1)[0]
    assert out.condition.gaze == (0.9, 0.0) and out.reflects == (knock.id,)  # the eyes go, the head cannot
    onset = stamp(SoundOnset, audio_ms=200.0, strength_db=25.0)
    assert reflex.on_event(onset) is not None  # the surprise shows without the flinch
    assert run(realizer, 1)[0].condition.emotion == "surprised"
    bare = msgspec.structs.replace(lacking("startle"), emotions=("neutral",))
    shy = ReflexPolicy(quiet(bare))
    silent = stamp(SoundOnset, audio_ms=300.0, strength_db=25.0)
    assert shy.on_event(silent) is None
    assert shy.declined[silent.id][0] == "no_reaction"


def test_a_reflex_asks_for_the_stand_in_the_backend_declares_so_the_minds_know_what_shows() -> None:
    realizer = quiet(lacking("startle", "look_at"))
    reflex = ReflexPolicy(realizer, fallbacks={"startle": "jump", "look_at": "turn"})
    knock = stamp(SoundClass, audio_ms=0.0, label="Knock", score=0.9)
    assert reflex.on_event(knock) is not None
    out = run(realizer, 1)[0]
    # A look_at's target is no parameter of a turn: the turn is drawn with its own defaults.
    assert (out.condition.action, out.reflects) == ("turn", (knock.id,))
    onset = stamp(SoundOnset, audio_ms=100.0, strength_db=25.0)
    assert reflex.on_event(onset) is not None
    out = run(realizer, 1)[0]
    assert (out.condition.action, out.condition.emotion, out.reflects) == ("jump", "surprised", (onset.id,))
    manifest = BackendManifest(
        name="lacking",
        vocabulary=realizer.manifest,
        first_chunk_frames=12,
        audio_rate=16_000,
        capabilities=Capabilities(
            rollback_depth=0, snapshots="none", interrupt="none", deterministic=True, reference_image=False
        ),
        costs=Costs(
            chunk_p50_ms=1.0, chunk_p95_ms=1.0, finish_p50_ms=1.0, first_chunk_ms=1.0, interrupt_ms=1.0
        ),
        fallbacks={"startle": "jump", "look_at": "turn"},
    )
    assert apply_fallbacks(out.condition, manifest) is out.condition  # the model draws what the minds chose


def test_idle_variety_holds_its_seconds_on_the_slow_clock_and_picks_only_known_actions() -> None:
    config = IdleConfig(seed=4, every_s=(3.0, 3.0), hold_s=(1.5, 1.5), actions=("nod", "wave"))
    realizer = Realizer(manifest=lacking("wave"), idle=IdleVariety(config))
    actions = [o.condition.action for o in run(realizer, 30)]
    # 3 s of rest = 4 chunks, then a 1.5 s nod = 2 chunks, again and again; never the missing wave.
    assert actions[:12] == ["idle"] * 4 + ["nod"] * 2 + ["idle"] * 4 + ["nod"] * 2
    assert set(actions) == {"idle", "nod"}


def test_a_scripted_timeline_and_its_trigger_cooldown_run_in_seconds_on_the_slow_clock() -> None:
    script = script_from_builtins(
        {
            "name": "slow",
            "idle": {"actions": []},
            "timeline": [
                {"at_s": 1.5, "behaviors": [{"kind": "action", "name": "nod", "duration_s": 0.75}]},
                {"at_s": 4.5, "behaviors": [{"kind": "action", "name": "jump", "duration_s": 0.75}]},
            ],
            "trigger": [
                {
                    "on": "gesture",
                    "gesture": "thumbs_up",
                    "cooldown_s": 3.0,
                    "behaviors": [{"kind": "emotion", "emotion": "happy", "duration_s": 0.75}],
                }
            ],
        },
        SLOW,
    )
    realizer = quiet(SLOW)
    runner = ScriptRunner(script, realizer)
    runner.attach()
    outs = run(realizer, 8)
    assert [o.condition.action for o in outs] == [
        "idle",
        "idle",
        "nod",
        "idle",
        "idle",
        "idle",
        "jump",
        "idle",
    ]
    assert runner.on_event(stamp(Gesture, gesture="thumbs_up"))
    run(realizer, 3)  # 2.25 s: cooling down
    assert not runner.on_event(stamp(Gesture, gesture="thumbs_up"))
    run(realizer, 1)  # 3 s
    assert runner.on_event(stamp(Gesture, gesture="thumbs_up"))


def test_an_emotion_the_model_lacks_is_refused_in_a_plan_but_left_out_by_a_reflex() -> None:
    bare = msgspec.structs.replace(SLOW, emotions=("neutral", "sad"))
    with pytest.raises(PlanError, match="unknown emotion 'happy'"):
        validate_block(Block(behaviors=[Emotion(emotion="happy")]), bare)
    realizer = quiet(bare)
    assert ReflexPolicy(realizer).on_event(stamp(Gesture, gesture="wave")) is not None
    assert run(realizer, 1)[0].condition == ChunkCondition("wave", audio=(0.0,) * 12)
