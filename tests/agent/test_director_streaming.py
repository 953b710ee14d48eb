"""Speaking a streamed reply's first sentence while the rest still streams (``speak_while_streaming``),
against the real local chat-completions server holding its stream part-way."""

from __future__ import annotations

import asyncio
import json

from agent.progress import CharacterSpeech
from agent.realizer import ChunkOutput
from agent.streamed_speech import first_sentence, partial_text
from tests.agent.stage import LIMIT_S, Stage, make_stage
from tests.support.llm_server import Call, Cut, Hold, LLMServer, Reply

TEXT = "I am Pip. I like the forest and the river."


def held_say(hold: Hold) -> Reply:
    # Two argument pieces: the first, '{"text": "I am Pip. I like t', already holds the first sentence.
    # Events: the role, the call's head, the two pieces, the finish: held after the first piece.
    return Reply(tool_calls=[Call("say", {"text": TEXT})], pieces=2, hold=hold)


async def first_cue(stage: Stage) -> ChunkOutput:
    """Tick chunks, as the frame clock would, until one cues speech."""
    for _ in range(int(LIMIT_S / 0.01)):
        out = stage.realizer.tick(stage.realizer.chunk + 1)
        if out.speech_start:
            return out
        await asyncio.sleep(0.01)
    raise AssertionError("no speech was cued")


def speech_events(stage: Stage) -> list[tuple[str, str, str]]:
    return [(e.state, e.speech_id, e.text) for e in stage.seen(CharacterSpeech)]


def test_the_text_of_a_say_is_read_from_its_arguments_as_they_stream() -> None:
    assert partial_text('{"text": "I am Pip. I li') == ("I am Pip. I li", False)
    assert partial_text('{"text": "Say \\"hi\\"\\n and \\u00e9t') == ('Say "hi"\n and ét', False)
    assert partial_text('{"text": "cut in an escape \\') == ("cut in an escape ", False)
    assert partial_text('{"text": "done.", "emotion": "happy"}') == ("done.", True)
    assert partial_text('{"emotion": "happy", "text": "Hi. There"') is None  # text not first
    assert first_sentence("I am Pip.  I like", 400) == "I am Pip."
    assert first_sentence("I am Pip.", 400) is None  # no more yet: it may not be the sentence's end
    assert first_sentence("A long sentence. More", 10) is None


async def test_the_first_sentence_sounds_before_the_reply_has_finished_streaming(llm: LLMServer) -> None:
    stage = make_stage(llm)
    try:
        hold = Hold(events=3)
        llm.enqueue(held_say(hold))
        await stage.say("Who are you?")
        async with asyncio.timeout(LIMIT_S):
            await hold.reached.wait()
        out = await first_cue(stage)  # while the reply is held, the speech is cued
        (cue,) = out.speech_start
        assert cue.text == "I am Pip." and cue.open and out.condition.speaking
        assert speech_events(stage) == []  # ``started`` waits for the whole text
        hold.release()
        await stage.settle()
        out = stage.realizer.tick(stage.realizer.chunk + 1)
        (extended,) = out.speech_extend
        assert (extended.speech_id, extended.text, extended.open) == (cue.speech_id, TEXT, False)
        assert speech_events(stage) == [("started", cue.speech_id, TEXT)]
        # One speech, its mouth open from the cue to its end, then ended with the whole text.
        outs = [out, *stage.tick(60)]
        speaking = [o.condition.speaking for o in outs]
        assert speaking[0] and not speaking[-1]
        assert speaking == sorted(speaking, reverse=True)  # no gap where the first sentence ended
        assert speech_events(stage) == [("ended", cue.speech_id, TEXT)]
        # The history holds the say as the LLM sent it, answered with the block that spoke it.
        (call,) = (await stage.director.history())[-3]["tool_calls"]
        assert json.loads(call["function"]["arguments"]) == {"text": TEXT}
        assert json.loads(llm.requests[1]["messages"][-1]["content"])["result"]["block"] == cue.block_id
    finally:
        await stage.director.stop()


async def test_a_reply_that_breaks_off_leaves_the_first_sentence_said_and_ended(llm: LLMServer) -> None:
    stage = make_stage(llm, retries=0)
    try:
        llm.enqueue(Cut(Reply(tool_calls=[Call("say", {"text": TEXT})], pieces=2), events=3))
        await stage.say("Who are you?")
        await stage.settle()
        (cue,) = (await first_cue(stage)).speech_start
        assert cue.text == "I am Pip."
        stage.tick(30)
        assert [(s, t) for s, _, t in speech_events(stage)] == [
            ("started", "I am Pip."),
            ("ended", "I am Pip."),
        ]
    finally:
        await stage.director.stop()


async def test_speech_cut_while_its_reply_still_streams_is_started_then_interrupted(llm: LLMServer) -> None:
    stage = make_stage(llm)
    try:
        hold = Hold(events=3)
        llm.enqueue(held_say(hold))
        await stage.say("Who are you?")
        async with asyncio.timeout(LIMIT_S):
            await hold.reached.wait()
        (cue,) = (await first_cue(stage)).speech_start
        stage.realizer.interrupt(cause="u-cut")
        stage.tick(1)
        hold.release()
        await stage.settle()
        events = speech_events(stage)
        assert [(s, i) for s, i, _ in events] == [("started", cue.speech_id), ("interrupted", cue.speech_id)]
        assert not any(o.speech_start or o.speech_extend for o in stage.tick(10))  # nothing more is said
    finally:
        await stage.director.stop()


async def test_without_the_switch_nothing_is_said_until_the_reply_is_whole(llm: LLMServer) -> None:
    stage = make_stage(llm, speak_while_streaming=False)
    try:
        hold = Hold(events=3)
        llm.enqueue(held_say(hold))
        await stage.say("Who are you?")
        async with asyncio.timeout(LIMIT_S):
            await hold.reached.wait()
        await asyncio.sleep(0.2)
        assert not any(o.speech_start for o in stage.tick(3))
        hold.release()
        await stage.settle()
        (cue,) = (await first_cue(stage)).speech_start
        assert cue.text == TEXT and not cue.open
    finally:
        await stage.director.stop()
