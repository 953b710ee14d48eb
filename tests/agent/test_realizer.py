"""The realizer: blocks on the frame clock, arbitration by source with channel locks, epochs, progress."""

from __future__ import annotations

import random

import pytest

from agent.idle import IdleConfig, IdleVariety
from agent.plans import (
    Action,
    Behavior,
    Block,
    Emotion,
    Gaze,
    Move,
    PlanError,
    SceneEvent,
    Source,
    Speech,
    SyncRef,
    Wait,
)
from agent.progress import (
    BlockDropped,
    BlockEnded,
    BlockInterrupted,
    BlockStarted,
    CharacterSpeech,
    StrokeReached,
)
from agent.realizer import ChunkOutput, Realizer
from agent.speech_timing import estimate_speech_s, word_time
from events.bus import EventBus, Subscription
from events.vocabulary import Event
from streaming_model.manifest import build_manifest
from tests.support.events import only

CHUNK_S = build_manifest().chunk_s


def drain(sub: Subscription) -> list[Event]:
    events = []
    while (event := sub.get_nowait()) is not None:
        events.append(event)
    return events


def run(realizer: Realizer, first: int, last: int) -> list[ChunkOutput]:
    return [realizer.tick(k) for k in range(first, last + 1)]


@pytest.fixture
def bus() -> EventBus:
    return EventBus()


def quiet_idle() -> IdleVariety:
    """Idle variety with no micro-actions, so a test sees exactly what its blocks do."""
    return IdleVariety(IdleConfig(actions=()))


def test_every_chunk_gets_a_valid_condition_even_with_no_plan() -> None:
    realizer = Realizer()
    for out in run(realizer, 0, 200):
        out.condition.validate()


def test_a_block_runs_from_the_next_tick_for_its_duration(bus: EventBus) -> None:
    sub = bus.subscribe()
    realizer = Realizer(bus, idle=quiet_idle())
    realizer.tick(0)
    realizer.submit(Block(id="w", source="script", behaviors=[Action(name="wave", duration_s=1.0)]))
    actions = [out.condition.action for out in run(realizer, 1, 9)]
    assert actions == ["wave"] * 6 + ["idle"] * 3
    kinds = [type(e) for e in drain(sub)]
    assert kinds == [BlockStarted, StrokeReached, BlockEnded]


def test_action_parameters_reach_the_condition(bus: EventBus) -> None:
    realizer = Realizer(bus, idle=quiet_idle())
    realizer.submit(
        Block(
            source="script",
            behaviors=[
                Action(name="turn", params={"side": "left"}, duration_s=0.5),
                Action(name="wave", params={"paw": "left"}, duration_s=0.5, start=SyncRef(offset_s=0.5)),
            ],
        )
    )
    conds = [o.condition for o in run(realizer, 0, 6)]
    assert [(c.action, c.side) for c in conds[:3]] == [("turn", "left")] * 3
    assert [(c.action, c.paw) for c in conds[3:6]] == [("wave", "left")] * 3


def test_a_reflex_borrows_the_body_and_hands_it_back(bus: EventBus) -> None:
    realizer = Realizer(bus, idle=quiet_idle())
    realizer.submit(Block(id="walk", source="script", behaviors=[Action(name="walk_right", duration_s=3.0)]))
    run(realizer, 0, 3)
    realizer.submit(Block(id="startle", source="reflex", cause="e1", behaviors=[Action(name="startle")]))
    outs = run(realizer, 4, 12)
    assert [o.condition.action for o in outs] == ["startle"] * 4 + ["walk_right"] * 5
    assert outs[0].owners["body"] == "startle" and outs[0].reflects == ("e1",)
    assert outs[4].owners["body"] == "walk"
    assert realizer.locks["body"] == "walk"


def test_a_lower_source_cannot_take_a_channel_from_a_higher_one(bus: EventBus) -> None:
    realizer = Realizer(bus, idle=quiet_idle())
    realizer.submit(Block(source="script", behaviors=[Action(name="sit", duration_s=2.0)]))
    realizer.submit(
        Block(source="director", behaviors=[Action(name="jump", duration_s=1.0), Emotion(emotion="happy")])
    )
    out = realizer.tick(0)
    # The body stays with the script; the face, which the script does not use, goes to the Director.
    assert out.condition.action == "sit"
    assert out.condition.emotion == "happy"


def test_a_lock_holds_a_channel_even_where_the_block_does_nothing_with_it(bus: EventBus) -> None:
    realizer = Realizer(bus, idle=quiet_idle())
    realizer.submit(Block(source="safety", locks=["body"], behaviors=[Wait(duration_s=1.0)]))
    realizer.submit(Block(source="director", behaviors=[Action(name="jump", duration_s=1.0)]))
    assert realizer.tick(0).condition.action == "idle"


def test_at_equal_rank_priority_then_the_newer_block_wins(bus: EventBus) -> None:
    realizer = Realizer(bus, idle=quiet_idle())
    realizer.submit(Block(source="director", priority=1, behaviors=[Action(name="nod", duration_s=1.0)]))
    realizer.submit(Block(source="director", behaviors=[Action(name="jump", duration_s=1.0)]))
    assert realizer.tick(0).condition.action == "nod"
    realizer.submit(Block(source="director", priority=1, behaviors=[Action(name="sit", duration_s=1.0)]))
    assert realizer.tick(1).condition.action == "sit"


def test_stale_epochs_die_at_dispatch(bus: EventBus) -> None:
    sub = bus.subscribe(BlockDropped)
    realizer = Realizer(bus)
    realizer.tick(0)
    epoch = realizer.epoch("director")
    queued = realizer.submit(
        Block(source="director", epoch=epoch, composition="append", behaviors=[Action(name="jump")])
    )
    assert queued.accepted
    realizer.advance_epoch("director")
    late = realizer.submit(Block(source="director", epoch=epoch, behaviors=[Action(name="nod")]))
    assert not late.accepted and "stale" in late.reason
    assert all(o.condition.action != "jump" for o in run(realizer, 1, 10))
    assert [e.reason for e in only(BlockDropped, drain(sub))] == ["stale", "stale"]


def test_a_block_not_started_before_it_expires_is_dropped(bus: EventBus) -> None:
    sub = bus.subscribe(BlockDropped)
    realizer = Realizer(bus)
    realizer.submit(Block(id="long", source="director", behaviors=[Action(name="sit", duration_s=3.0)]))
    realizer.submit(
        Block(source="director", composition="append", expires_s=1.0, behaviors=[Action(name="jump")])
    )
    run(realizer, 0, 30)
    assert [e.reason for e in only(BlockDropped, drain(sub))] == ["expired"]


def test_append_waits_for_the_same_sources_blocks_on_shared_channels(bus: EventBus) -> None:
    realizer = Realizer(bus, idle=quiet_idle())
    realizer.submit(Block(source="director", behaviors=[Action(name="nod", duration_s=1.0)]))
    realizer.submit(
        Block(source="director", composition="append", behaviors=[Action(name="jump", duration_s=1.0)])
    )
    realizer.submit(
        Block(source="director", composition="append", behaviors=[Emotion(emotion="sad", duration_s=1)])
    )
    outs = run(realizer, 0, 12)
    assert [o.condition.action for o in outs] == ["nod"] * 6 + ["jump"] * 6 + ["idle"]
    assert outs[0].condition.emotion == "sad"  # no shared channel: it did not wait


def test_replace_ends_the_same_sources_blocks(bus: EventBus) -> None:
    sub = bus.subscribe(BlockInterrupted, BlockDropped)
    realizer = Realizer(bus, idle=quiet_idle())
    realizer.submit(Block(id="a", source="director", behaviors=[Action(name="sit", duration_s=3.0)]))
    realizer.submit(Block(id="b", source="director", composition="append", behaviors=[Action(name="nod")]))
    run(realizer, 0, 2)
    realizer.submit(Block(source="director", composition="replace", behaviors=[Action(name="jump")]))
    assert realizer.tick(3).condition.action == "jump"
    ended = [
        e for e in drain(sub) if isinstance(e, BlockInterrupted | BlockDropped)
    ]  # all are, by subscription
    assert {(type(e).__name__, e.block_id) for e in ended} == {
        ("BlockInterrupted", "a"),
        ("BlockDropped", "b"),
    }


def test_an_invalid_block_is_refused_with_a_plan_error() -> None:
    with pytest.raises(PlanError):
        Realizer().submit(Block(behaviors=[Action(name="teleport")]))


def test_speech_starts_with_a_cue_moves_the_mouth_and_ends(bus: EventBus) -> None:
    sub = bus.subscribe(CharacterSpeech)
    realizer = Realizer(bus)
    realizer.submit(Block(source="director", behaviors=[Speech(text="Hello there!", emotion="happy")]))
    outs = run(realizer, 0, 12)
    assert outs[0].speech_start[0].text == "Hello there!"
    speaking = [o.condition.speaking for o in outs]
    assert speaking[0] and not speaking[-1]
    assert any(max(o.condition.audio) > 0.5 for o in outs if o.condition.speaking)
    assert outs[0].condition.emotion == "happy"
    states = [(e.state, e.heard_text) for e in only(CharacterSpeech, drain(sub))]
    assert states == [("started", None), ("ended", "Hello there!")]


def test_a_stroke_falls_on_the_named_word(bus: EventBus) -> None:
    sub = bus.subscribe(StrokeReached, CharacterSpeech)
    realizer = Realizer(bus, idle=quiet_idle())
    text = "Well then, my dear friend, hello!"
    realizer.submit(
        Block(
            source="director",
            behaviors=[Speech(id="s", text=text), Action(name="wave", stroke=SyncRef(to="s", word="hello"))],
        )
    )
    outs = run(realizer, 0, 30)
    events = drain(sub)
    stroke = next(e for e in events if isinstance(e, StrokeReached))
    start = outs.index(next(o for o in outs if o.speech_start))
    at = word_time(text, estimate_speech_s(text), "hello")
    assert at is not None
    expected = start + at / CHUNK_S
    assert abs(stroke.chunk - expected) <= 1
    assert outs[stroke.chunk].condition.action == "wave"


def test_the_server_reports_the_real_duration_and_what_was_heard(bus: EventBus) -> None:
    sub = bus.subscribe(CharacterSpeech)
    realizer = Realizer(bus, voice="server")
    realizer.submit(
        Block(
            id="b",
            source="director",
            behaviors=[
                Speech(id="s", text="one two three four five six"),
                Action(name="nod", start=SyncRef(to="s", point="end")),
            ],
        )
    )
    cue = realizer.tick(0).speech_start[0]
    realizer.speech_started(cue.speech_id, duration_s=1.0)
    realizer.speech_audio(cue.speech_id, [0.9] * 24)
    outs = run(realizer, 1, 8)
    assert outs[0].condition.audio == (0.9, 0.9, 0.9, 0.9)
    assert [o.condition.action for o in outs[5:7]] == ["nod", "nod"]  # the nod follows the real end
    realizer.speech_ended(cue.speech_id)
    assert [e.state for e in only(CharacterSpeech, drain(sub))] == ["started", "ended"]


def test_a_voice_that_starts_after_its_cue_moves_what_is_synchronised_to_it(bus: EventBus) -> None:
    def nod_chunks(delay_s: float) -> list[int]:
        realizer = Realizer(EventBus(), voice="server")
        realizer.submit(
            Block(
                source="director",
                behaviors=[
                    Speech(id="s", text="well then hello there my friend"),
                    Action(name="nod", stroke=SyncRef(to="s", word="hello")),
                    Action(name="jump", start=SyncRef(to="s", point="end", offset_s=0.5), duration_s=0.5),
                ],
            )
        )
        cue = realizer.tick(0).speech_start[0]
        realizer.speech_started(cue.speech_id, duration_s=2.0, delay_s=delay_s)
        outs = run(realizer, 1, 30)
        return [o.chunk for o in outs if o.condition.action in ("nod", "jump")]

    # The server sounds speech one chunk after its cue: the stroke and the later jump come one chunk later.
    assert nod_chunks(CHUNK_S) == [c + 1 for c in nod_chunks(0.0)]


def test_an_interrupt_cuts_speech_and_reports_what_was_heard(bus: EventBus) -> None:
    sub = bus.subscribe(CharacterSpeech, BlockInterrupted)
    realizer = Realizer(bus)
    realizer.submit(
        Block(source="director", behaviors=[Speech(text="I was about to tell you a very long story")])
    )
    run(realizer, 0, 5)
    assert realizer.interrupt() != []
    out = realizer.tick(6)
    assert out.speech_stop and not out.condition.speaking
    events = drain(sub)
    cut = next(e for e in events if isinstance(e, CharacterSpeech) and e.state == "interrupted")
    assert cut.heard_text and "I was" in cut.heard_text and "story" not in cut.heard_text
    assert any(isinstance(e, BlockInterrupted) for e in events)


def test_the_server_side_interruption_carries_its_heard_text(bus: EventBus) -> None:
    sub = bus.subscribe(CharacterSpeech)
    realizer = Realizer(bus, voice="server")
    realizer.submit(Block(source="director", behaviors=[Speech(text="Let me tell you about my day")]))
    cue = realizer.tick(0).speech_start[0]
    realizer.speech_started(cue.speech_id, 2.0)
    run(realizer, 1, 4)
    realizer.interrupt()
    assert realizer.tick(5).speech_stop == (cue.speech_id,)
    realizer.speech_interrupted(cue.speech_id, heard_text="Let me tell you")
    cut = only(CharacterSpeech, drain(sub))[-1]
    assert (cut.state, cut.heard_text) == ("interrupted", "Let me tell you")


def test_higher_ranked_speech_cuts_lower_speech(bus: EventBus) -> None:
    realizer = Realizer(bus)
    realizer.submit(Block(source="director", behaviors=[Speech(text="Let me think about that for a while")]))
    first = realizer.tick(0).speech_start[0]
    realizer.submit(Block(source="script", behaviors=[Speech(text="Who is there?")]))
    out = realizer.tick(1)
    assert out.speech_stop == (first.speech_id,)
    assert out.speech_start[0].text == "Who is there?"


def test_gaze_moves_and_scene_events_fire_once(bus: EventBus) -> None:
    realizer = Realizer(bus, idle=quiet_idle())
    realizer.submit(
        Block(source="script", behaviors=[Gaze(x=0.8, y=-0.2, duration_s=0.5), SceneEvent(name="shadow")])
    )
    outs = run(realizer, 0, 4)
    assert outs[0].condition.gaze == (0.8, -0.2)
    assert [o.scene_events for o in outs[:2]] == [("shadow",), ()]


def test_move_walks_toward_the_target_and_stops_there(bus: EventBus) -> None:
    realizer = Realizer(bus, idle=quiet_idle())
    realizer.submit(Block(source="script", behaviors=[Move(x=-0.6)]))
    actions = [o.condition.action for o in run(realizer, 0, 12)]
    assert actions[0] == "walk_left" and actions[-1] == "idle"
    assert realizer.position == pytest.approx(-0.6, abs=0.1)


def test_ticking_the_same_chunk_again_adds_new_blocks_without_repeating_effects(bus: EventBus) -> None:
    sub = bus.subscribe(BlockStarted)
    realizer = Realizer(bus, idle=quiet_idle())
    realizer.submit(Block(source="script", behaviors=[Emotion(emotion="sad", duration_s=1)]))
    assert realizer.tick(0).condition.action == "idle"
    realizer.submit(Block(source="reflex", behaviors=[Action(name="startle")]))
    again = realizer.tick(0)
    assert again.condition.action == "startle" and again.condition.emotion == "sad"
    assert len(drain(sub)) == 2
    with pytest.raises(ValueError, match="before the last ticked chunk"):
        realizer.tick(-1)


def test_idle_variety_never_leaves_the_character_frozen() -> None:
    realizer = Realizer(idle=IdleVariety(IdleConfig(seed=3)))
    outs = run(realizer, 0, 24 * 30)
    actions = [o.condition.action for o in outs]
    longest_idle = max(len(run_) for run_ in "".join("i" if a == "idle" else "x" for a in actions).split("x"))
    assert longest_idle * 4 / 24 <= 6.0
    assert len({o.condition.gaze for o in outs}) > 10


def test_idle_variety_is_deterministic_from_its_seed() -> None:
    def conditions(seed: int) -> list[object]:
        realizer = Realizer(idle=IdleVariety(IdleConfig(seed=seed)))
        return [o.condition for o in run(realizer, 0, 300)]

    assert conditions(5) == conditions(5)
    assert conditions(5) != conditions(6)


def test_a_snapshot_restores_the_same_future() -> None:
    realizer = Realizer(idle=IdleVariety(IdleConfig(seed=9)))
    realizer.submit(Block(source="script", behaviors=[Action(name="walk_left", duration_s=5.0)]))
    realizer.submit(
        Block(source="director", behaviors=[Speech(text="A long sentence to keep the voice busy.")])
    )
    run(realizer, 0, 9)
    saved = realizer.snapshot()
    realizer.submit(Block(source="reflex", behaviors=[Action(name="startle")]))
    first = run(realizer, 10, 60)
    realizer.restore(saved)
    realizer.submit(Block(source="reflex", behaviors=[Action(name="startle")]))
    assert run(realizer, 10, 60) == first
    assert realizer.position == pytest.approx(-1.0)


def test_speech_waits_for_a_voice_held_by_a_higher_source(bus: EventBus) -> None:
    realizer = Realizer(bus)
    realizer.submit(Block(source="script", behaviors=[Speech(text="Who is there?")]))
    realizer.submit(Block(source="director", behaviors=[Speech(text="Hi.")]))
    outs = run(realizer, 0, 12)
    started = [(o.chunk, o.speech_start[0].text) for o in outs if o.speech_start]
    assert started[0] == (0, "Who is there?")
    assert started[1][1] == "Hi." and started[1][0] >= 5
    assert not any(o.speech_stop for o in outs)


def test_a_user_command_outranks_everything_and_survives_an_interrupt(bus: EventBus) -> None:
    realizer = Realizer(bus, idle=quiet_idle())
    realizer.submit(Block(source="safety", behaviors=[Action(name="sit", duration_s=2.0)]))
    realizer.submit(Block(id="cmd", source="user", behaviors=[Action(name="jump", duration_s=2.0)]))
    assert realizer.tick(0).condition.action == "jump"
    stopped = realizer.interrupt()
    assert len(stopped) == 1 and "cmd" not in stopped
    assert realizer.blocks() == [("cmd", "user", True)]


def test_speech_that_waits_too_long_for_the_voice_is_given_up_as_never_heard(bus: EventBus) -> None:
    sub = bus.subscribe(CharacterSpeech, BlockEnded)
    realizer = Realizer(bus)
    realizer.submit(Block(source="script", behaviors=[Speech(text="la " * 70)]))  # about 14 s
    realizer.submit(Block(id="late", source="director", behaviors=[Speech(text="Hi.")]))
    run(realizer, 0, 100)
    events = drain(sub)
    given_up = [e for e in events if isinstance(e, CharacterSpeech) and e.block_id == "late"]
    assert [(e.state, e.heard_text) for e in given_up] == [("interrupted", "")]
    assert any(isinstance(e, BlockEnded) and e.block_id == "late" for e in events)


def test_idle_variety_stays_within_what_a_condition_accepts() -> None:
    realizer = Realizer(idle=IdleVariety(IdleConfig(seed=1, gaze_range=5.0, every_s=(0.0, 0.1))))
    for out in run(realizer, 0, 300):
        out.condition.validate()


def test_random_plans_interrupts_and_epochs_always_give_valid_conditions(bus: EventBus) -> None:
    rng = random.Random(4)
    realizer = Realizer(bus)
    sources: list[Source] = ["user", "safety", "reflex", "script", "director"]

    def behavior(i: int) -> Behavior:
        kind = rng.choice(["action", "speech", "emotion", "gaze", "move", "wait", "scene"])
        ref = (
            SyncRef(to=f"b{i - 1}", point=rng.choice(["start", "stroke", "end"]))
            if i and rng.random() < 0.4
            else None
        )
        if kind == "action":
            name = rng.choice(["wave", "nod", "jump", "look_at", "sit", "startle"])
            params: dict[str, float | str] = {"target_x": rng.uniform(-1, 1)} if name == "look_at" else {}
            return Action(id=f"b{i}", name=name, params=params, duration_s=rng.uniform(0.2, 3.0), start=ref)
        if kind == "speech":
            return Speech(id=f"b{i}", text=" ".join(["word"] * rng.randint(1, 12)), start=ref)
        if kind == "emotion":
            return Emotion(
                id=f"b{i}", emotion=rng.choice(["happy", "sad"]), duration_s=rng.uniform(0.2, 3.0), start=ref
            )
        if kind == "gaze":
            return Gaze(id=f"b{i}", x=rng.uniform(-1, 1), y=rng.uniform(-1, 1), duration_s=1.0, start=ref)
        if kind == "move":
            return Move(id=f"b{i}", x=rng.uniform(-1, 1), start=ref)
        if kind == "scene":
            return SceneEvent(id=f"b{i}", name="shadow", start=ref)
        return Wait(id=f"b{i}", duration_s=rng.uniform(0.2, 2.0), start=ref)

    for k in range(600):
        if rng.random() < 0.15:
            source = rng.choice(sources)
            block = Block(
                source=source,
                epoch=realizer.epoch(source) - (rng.random() < 0.1),
                composition=rng.choice(["merge", "append", "replace"]),
                priority=rng.randint(0, 2),
                behaviors=[behavior(i) for i in range(rng.randint(1, 4))],
            )
            try:
                realizer.submit(block)
            except PlanError:
                pass  # a random reference to something open-ended; refusing it is right
        if rng.random() < 0.02:
            realizer.interrupt(rng.choice(sources))
        if rng.random() < 0.02:
            realizer.advance_epoch(rng.choice(sources))
        realizer.tick(k).condition.validate()
        if rng.random() < 0.05:
            realizer.tick(k).condition.validate()  # a chunk in flight, decided again


def test_speech_listeners_hear_the_first_speech_of_each_block_accepted_before_any_chunk_cues_it() -> None:
    realizer = Realizer()
    heard: list[tuple[str, str]] = []
    realizer.add_speech_listener(lambda text, source: heard.append((text, source)))
    realizer.tick(0)
    realizer.submit(Block(behaviors=[Action(name="nod"), Speech(text="Hello."), Speech(text="Again.")]))
    realizer.submit(Block(behaviors=[Action(name="jump")]))  # no speech: nothing to hear
    realizer.submit(Block(source="script", behaviors=[Speech(text="Scripted.")]))
    old = realizer.epoch("director")
    realizer.advance_epoch("director")
    stale = realizer.submit(Block(source="director", epoch=old, behaviors=[Speech(text="Too late.")]))
    assert not stale.accepted
    assert heard == [("Hello.", "director"), ("Scripted.", "script")]
