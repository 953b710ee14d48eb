"""The default reflex policy: reactions land in the next chunk, borrow channels and hand them back."""

from __future__ import annotations

import asyncio

import msgspec

from agent.idle import IdleConfig, IdleVariety
from agent.plans import Action, Block
from agent.realizer import ChunkOutput, Realizer
from agent.reflex import ReflexConfig, ReflexPolicy
from events.bus import EventBus
from events.stamp import Stamper
from events.vocabulary import (
    EndOfTurn,
    Gesture,
    SoundClass,
    SoundOnset,
    SpeechStarted,
    SpeechStopped,
    TextInput,
)
from tests.agent.frames import probe

stamp = Stamper("s", prefix="u")


def setup() -> tuple[Realizer, ReflexPolicy]:
    realizer = Realizer(idle=IdleVariety(IdleConfig(actions=())))
    return realizer, ReflexPolicy(realizer)


def run(realizer: Realizer, count: int) -> list[ChunkOutput]:
    start = realizer.chunk + 1
    return [realizer.tick(k) for k in range(start, start + count)]


def test_a_sound_onset_startles_in_the_next_chunk_and_the_plan_resumes() -> None:
    realizer, reflex = setup()
    realizer.submit(Block(source="script", behaviors=[Action(name="walk_right", duration_s=4.0)]))
    run(realizer, 3)
    onset = stamp(SoundOnset, audio_ms=500.0, strength_db=25.0)
    assert reflex.on_event(onset) is not None
    outs = run(realizer, 10)
    assert outs[0].condition.action == "startle" and outs[0].reflects == (onset.id,)
    assert outs[0].condition.emotion == "surprised"
    assert outs[-1].condition.action == "walk_right"
    assert reflex.on_event(stamp(SoundOnset, audio_ms=900.0, strength_db=25.0)) is None  # cooling down


def test_a_knock_makes_the_character_look_toward_the_door() -> None:
    realizer, reflex = setup()
    reflex.on_event(stamp(SoundClass, audio_ms=1000.0, label="Knock", score=0.8))
    outs = run(realizer, 9)
    assert outs[0].condition.action == "look_at" and outs[0].condition.target == (0.9, 0.0)
    assert probe([o.condition for o in outs]).facing[-1] > 0.1


def test_listening_keeps_eyes_on_the_user_nods_and_lets_go_when_the_user_stops() -> None:
    realizer, reflex = setup()
    realizer.submit(Block(source="director", behaviors=[Action(name="sit", duration_s=20.0)]))
    run(realizer, 2)
    reflex.on_event(stamp(SpeechStarted, audio_ms=0.0))
    outs = run(realizer, 24)
    assert all(o.condition.gaze == (0.0, 0.0) for o in outs)
    assert "nod" in [o.condition.action for o in outs[17:24]]  # a nod about 3 s in
    reflex.on_event(stamp(SpeechStopped, audio_ms=4000.0, duration_ms=4000.0))
    assert run(realizer, 1)[0].condition.action == "sit"
    reflex.on_event(stamp(EndOfTurn, audio_ms=4000.0, silence_ms=500.0))  # nothing left to release


def test_gestures_are_answered() -> None:
    realizer, reflex = setup()
    reflex.on_event(stamp(Gesture, gesture="wave", confidence=0.9))
    wave = run(realizer, 6)
    assert all(o.condition.action == "wave" and o.condition.emotion == "happy" for o in wave[:6])
    reflex.on_event(stamp(Gesture, gesture="point", x=1.0, y=0.5))
    assert run(realizer, 1)[0].condition.target == (1.0, 0.0)
    reflex.on_event(stamp(Gesture, gesture="thumbs_up"))
    assert run(realizer, 1)[0].condition.emotion == "happy"
    run(realizer, 18)  # the thumbs up's happiness is over
    reflex.on_event(stamp(Gesture, gesture="nod"))
    assert run(realizer, 1)[0].condition.action == "nod"
    reflex.on_event(stamp(Gesture, gesture="shake_head"))
    assert run(realizer, 1)[0].condition.emotion == "sad"
    assert reflex.on_event(stamp(Gesture, gesture="wave", confidence=0.1)) is None
    assert reflex.on_event(stamp(Gesture, gesture="shrug")) is None


def test_typed_text_gets_a_look_and_a_nod_in_the_next_chunk() -> None:
    realizer, reflex = setup()
    realizer.submit(Block(source="script", behaviors=[Action(name="sit", duration_s=10.0)]))
    run(realizer, 2)
    text = stamp(TextInput, text="hello there")
    assert reflex.on_event(text) is not None
    outs = run(realizer, 8)
    assert outs[0].reflects == (text.id,) and outs[0].condition.action == "nod"
    assert outs[0].condition.gaze == (0.0, 0.0)
    assert outs[-1].condition.action == "sit"  # handed back
    assert reflex.on_event(stamp(TextInput, text="again")) is None  # cooling down


def test_reflexes_can_be_switched_off() -> None:
    realizer = Realizer()
    reflex = ReflexPolicy(realizer, ReflexConfig(startle=False, gestures=False, attentive=False))
    assert reflex.on_event(stamp(SoundOnset, audio_ms=1.0, strength_db=30.0)) is None
    assert reflex.on_event(stamp(Gesture, gesture="wave")) is None
    assert reflex.on_event(stamp(SpeechStarted, audio_ms=1.0)) is None


async def test_the_policy_reads_the_bus() -> None:
    bus = EventBus()
    realizer = Realizer(bus)
    task = ReflexPolicy(realizer).listen(bus)
    await bus.publish(stamp(SoundOnset, audio_ms=1.0, strength_db=30.0))
    await asyncio.sleep(0)
    assert realizer.tick(0).condition.action == "startle"
    bus.close()
    await task


def test_a_second_wave_within_the_cooldown_is_declined_with_the_reason() -> None:
    realizer, reflex = setup()
    first = stamp(Gesture, gesture="wave", confidence=0.9)
    assert reflex.on_event(first) is not None
    run(realizer, 2)
    second = stamp(Gesture, gesture="wave", confidence=0.9)
    assert reflex.on_event(second) is None
    reason, detail = reflex.declined[second.id]
    assert reason == "cooldown" and "s left" in detail
    assert first.id not in reflex.declined


def test_a_gesture_no_reflex_answers_is_declined_as_no_reaction() -> None:
    _, reflex = setup()
    nowhere = stamp(Gesture, gesture="point", confidence=0.9)  # a point without where: nothing to look at
    assert reflex.on_event(nowhere) is None
    assert reflex.declined[nowhere.id][0] == "no_reaction"


def test_an_onset_foreseen_gives_the_startle_and_leaves_everything_as_it_was() -> None:
    # What a splice prepared on an onset's hunch is made under (server.core.foresight): the re-decision the
    # startle would bring, with nothing submitted, cooled down or reported.
    bus = EventBus()
    told = bus.subscribe(maxsize=1000)
    realizer = Realizer(bus, idle=IdleVariety(IdleConfig(actions=())))
    reflex = ReflexPolicy(realizer)
    realizer.submit(Block(source="script", behaviors=[Action(name="walk_right", duration_s=4.0)]))
    k = run(realizer, 3)[-1].chunk
    before = msgspec.msgpack.encode(realizer.state())
    while told.get_nowait() is not None:
        pass
    onset = stamp(SoundOnset, audio_ms=500.0, strength_db=25.0)
    foreseen = realizer.foresee(k, lambda: reflex.imagine(onset))
    assert foreseen.condition.action == "startle" and foreseen.reflects == (onset.id,)
    assert msgspec.msgpack.encode(realizer.state()) == before and realizer.blocks() == [
        ("script-1", "script", True)
    ]
    assert told.get_nowait() is None and not realizer.caused(onset.id)
    assert reflex.on_event(onset) is not None  # not cooling down: the foresight never startled
    redone = realizer.propose(k)
    assert redone.output.condition == foreseen.condition
