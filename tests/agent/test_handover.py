"""A session's minds handed to another front end (``agent.handover``): fresh minds that take the notes of
a chunk go on exactly as the minds that wrote them would have; the Director (against a real local
chat-completions server) keeps its memory, and what it still owed is told."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agent.director_config import DirectorConfig
from agent.handover import CHECKPOINT, DIRECTOR, MINDS, STORY, Handover, HandoverError, adopt_story, take_over
from agent.minds import Minds
from agent.progress import CharacterSpeech, InputUnshown
from agent.script import script_from_builtins
from agent.story.format import load_story
from agent.story.player import StoryPlayer
from agent.story.store import CheckpointStore
from events.bus import EventBus
from events.stamp import Stamper
from events.vocabulary import Gesture, TextInput
from streaming_model.condition import ChunkCondition
from streaming_model.manifest import build_manifest
from tests.support.llm_server import Call, Hold, LLMServer, Reply
from tools.character import build_toolbox

MANIFEST = build_manifest()
LIMIT_S = 10.0
HORIZON_S = 15.0
"""How far the minds are run after the notes: past the plan's second entry and into its idle variety."""

PLAN: dict[str, Any] = {
    "name": "two acts",
    "idle": {"seed": 3},
    "timeline": [
        {"at_s": 0.5, "behaviors": [{"kind": "action", "name": "wave", "duration_s": 1.0}]},
        {"at_s": 4.0, "behaviors": [{"kind": "action", "name": "jump", "duration_s": 1.0}]},
    ],
    "trigger": [
        {
            "on": "gesture",
            "gesture": "thumbs_up",
            "once": True,
            "behaviors": [{"kind": "emotion", "emotion": "happy", "duration_s": 1.0}],
        }
    ],
}


def scripted() -> Minds:
    return Minds.build(
        bus=EventBus(),
        session="s",
        mind="script",
        manifest=MANIFEST,
        config=DirectorConfig(),
        script=script_from_builtins(PLAN, MANIFEST),
        voice="estimate",
    )


def run(minds: Minds, first: int, last: int) -> list[ChunkCondition]:
    return [minds.tick(k).condition for k in range(first, last + 1)]


def chunks_in(seconds: float) -> int:
    return round(seconds / MANIFEST.chunk_s)


async def test_a_scripted_plan_goes_on_where_it_was_not_from_its_start() -> None:
    original = scripted()
    original.start()
    stamp = Stamper("s")
    noted_at = chunks_in(2.0)  # after the first entry (0.5 s), before the second (4 s)
    run(original, 0, noted_at // 2)
    await original.bus.publish(stamp(Gesture, gesture="thumbs_up"))  # spends the once-only trigger
    await asyncio.sleep(0)
    run(original, noted_at // 2 + 1, noted_at)
    notes = await Handover(original).notes()
    goes_on = run(original, noted_at + 1, chunks_in(HORIZON_S))

    taker = scripted()
    resumed = await take_over(taker, notes, noted_at + 1)
    taker.start()
    assert resumed.generation == 1 and resumed.event_prefix != "e"  # its ids are never the first's
    assert run(taker, noted_at + 1, chunks_in(HORIZON_S)) == goes_on
    actions = [c.action for c in goes_on]
    assert "jump" in actions and "wave" not in actions  # the second entry, not the first again
    # A trigger spent before the notes stays spent.
    await taker.bus.publish(Stamper("s", prefix=resumed.event_prefix)(Gesture, gesture="thumbs_up"))
    await asyncio.sleep(0)
    assert taker.script is not None and [f.name for f in taker.script.fired].count("trigger[0]") == 1
    # Minds that start afresh instead begin the timeline again: what the notes are for.
    fresh = scripted()
    fresh.start()
    assert "wave" in [c.action for c in run(fresh, noted_at + 1, chunks_in(HORIZON_S))]
    for minds in (original, taker, fresh):
        await minds.stop()


async def test_notes_of_another_chunk_or_unreadable_ones_are_refused() -> None:
    original = scripted()
    original.start()
    run(original, 0, 5)
    notes = await Handover(original).notes()
    with pytest.raises(HandoverError, match="chunk 5"):
        await take_over(scripted(), notes, 9)
    with pytest.raises(HandoverError, match="cannot be read"):
        await take_over(scripted(), {MINDS: b"not a note"}, 6)
    with pytest.raises(HandoverError, match="never noted"):
        await take_over(scripted(), {}, 6)
    await original.stop()


def directed(llm: LLMServer) -> Minds:
    return Minds.build(
        bus=EventBus(),
        session="s",
        mind="llm",
        manifest=MANIFEST,
        config=DirectorConfig(base_url=llm.base_url, debounce_s=0.01),
        tools=build_toolbox(MANIFEST, ()),
    )


async def test_the_director_keeps_its_memory_and_its_speech_cut_mid_way_is_told() -> None:
    async with LLMServer() as llm:
        original = directed(llm)
        assert original.director is not None
        original.start()
        stamp = Stamper("s")
        llm.enqueue(Reply(tool_calls=[Call("say", {"text": "My name is Ada, and I like long stories."})]))
        await original.bus.publish(stamp(TextInput, text="Who are you?"))
        async with asyncio.timeout(LIMIT_S):
            await original.director.settle()
        run(original, 0, 2)  # the speech is cued to the voice
        notes = await Handover(original).notes()
        assert DIRECTOR in notes

        taker = directed(llm)
        assert taker.director is not None
        resumed = await take_over(taker, notes, 3)
        assert await taker.director.history() == await original.director.history()
        speech = taker.bus.subscribe(CharacterSpeech, name="test")
        taker.start()
        resumed.tell(taker)
        cut = speech.get_nowait()
        assert isinstance(cut, CharacterSpeech) and cut.state == "interrupted"
        assert cut.text.startswith("My name is Ada")
        for minds in (original, taker):
            await minds.stop()


async def test_inputs_the_director_had_not_answered_are_told_they_will_not_show() -> None:
    async with LLMServer() as llm:
        original = directed(llm)
        assert original.director is not None
        original.start()
        stamp = Stamper("s")
        hold = Hold(events=1)
        llm.enqueue(Reply(tool_calls=[Call("say", {"text": "Let me think."})], hold=hold))
        question = stamp(TextInput, text="What is the time?")
        await original.bus.publish(question)
        async with asyncio.timeout(LIMIT_S):
            await hold.reached.wait()
        run(original, 0, 1)
        notes = await Handover(original).notes()
        hold.release()

        taker = directed(llm)
        resumed = await take_over(taker, notes, 2)
        told = taker.bus.subscribe(InputUnshown, name="test")
        taker.start()
        resumed.tell(taker)
        unshown = told.get_nowait()
        assert isinstance(unshown, InputUnshown) and (unshown.cause, unshown.reason) == (question.id, "stale")
        assert "another front end" in unshown.detail
        for minds in (original, taker):
            await minds.stop()


async def test_a_story_goes_on_in_another_store_where_it_was_and_can_be_rewound_there() -> None:
    original = scripted()
    first_store = CheckpointStore()
    player = await StoryPlayer.begin(
        load_story("garden_gate"), original.realizer, session="s", store=first_store, seed=3
    )
    start = player.current
    await player.choose("wave")
    handover = Handover(original)
    notes = await handover.notes(story=player)
    assert STORY in notes and {name for name in notes if name.startswith(CHECKPOINT)} == {
        CHECKPOINT + start,
        CHECKPOINT + player.current,
    }
    # Nothing was written since: the story's rows are not sent again; a checkpoint taken again is.
    assert STORY not in await handover.notes(story=player)
    await player.checkpoint(None)
    assert set(await handover.notes(story=player)) == {
        MINDS,
        STORY,
        CHECKPOINT + player.current,
    }

    taker, second_store = scripted(), CheckpointStore()
    resumed = await take_over(taker, notes, original.realizer.chunk + 1)
    adopted = await adopt_story(second_store, notes, resumed, session="s", minds=taker)
    assert adopted.view() == player.view()
    restored = await adopted.rewind(start)
    assert restored.view.node == "gate" and restored.view.variables == {"trust": 0, "has_key": False}
    for store in (first_store, second_store):
        await store.close()
