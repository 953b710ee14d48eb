"""The Director against a real local chat-completions server: tool calls to plans, barge-in, failures."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from agent.director import Director
from agent.director_config import DirectorConfig
from agent.progress import BlockDropped, CharacterSpeech, DirectorError, DirectorPlan, InputUnshown
from agent.realizer import ChunkOutput, Realizer
from events.bus import EventBus
from events.stamp import Stamper
from events.tracing import (
    DIRECTOR_DONE,
    DIRECTOR_RUN,
    LLM_DONE,
    LLM_FIRST_TOKEN,
    LLM_REQUEST,
    SPEECH_END,
    TRANSCRIBED,
    TURN_ENDED,
)
from events.vocabulary import EndOfTurn, Event, Gesture, SoundClass, SpeechStarted, TextInput, Transcript
from tests.agent.frames import probe
from tests.agent.stage import LIMIT_S, MANIFEST, Stage, make_stage
from tests.support.llm_server import Call, Drop, Hold, HttpError, LLMServer, Malformed, Reply
from tools.character import build_toolbox


def tool_messages(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [json.loads(m["content"]) for m in request["messages"] if m["role"] == "tool"]


async def test_a_spoken_question_becomes_say_and_perform_blocks_in_the_realizer(stage: Stage) -> None:
    stage.llm.enqueue(
        Reply(
            tool_calls=[
                Call("say", {"text": "Hello there, friend!", "emotion": "happy"}),
                Call("perform", {"action": "wave", "paw": "left", "duration_s": 2.0}),
            ],
            pieces=5,
        )
    )
    turn = await stage.say("Hi! Who are you?")
    await stage.settle()
    first = stage.llm.requests[0]
    assert first["stream"] is True and first["model"] == "gpt-4o-mini"
    assert {t["function"]["name"] for t in first["tools"]} >= {"say", "perform", "move_to", "remember"}
    assert first["messages"][0]["role"] == "system" and "window" in first["messages"][0]["content"]
    assert first["messages"][-1] == {"role": "user", "content": 'The user said: "Hi! Who are you?"'}
    outs = stage.tick(12)
    assert outs[0].speech_start[0].text == "Hello there, friend!"
    assert outs[0].reflects == (turn.id,)
    assert all(o.condition.action == "wave" and o.condition.paw == "left" for o in outs)
    assert outs[1].condition.speaking and outs[1].condition.emotion == "happy"
    assert len(stage.seen(DirectorPlan)) == 2
    shown = probe([o.condition for o in outs])  # the frames show the wave and the speaking mouth
    assert shown.paw_left[-4:].all() and not shown.paw_right[-4:].any()
    assert shown.mouth.max() > 0.2
    # The tool results went back to the LLM, which then answered with no tool call: the run is over.
    assert len(stage.llm.requests) == 2
    assert [r["ok"] for r in tool_messages(stage.llm.requests[1])] == [True, True]


async def test_a_transcript_that_comes_after_its_turn_ended_still_reaches_the_director(stage: Stage) -> None:
    stage.llm.enqueue(Reply(text=""))
    await stage.bus.publish(stage.stamp(EndOfTurn, audio_ms=1500.0, silence_ms=700.0))
    await stage.bus.publish(stage.stamp(Transcript, text="Where is the window?", final=True, audio_ms=1500.0))
    await stage.settle()
    assert stage.llm.requests[0]["messages"][-1]["content"] == 'The user said: "Where is the window?"'


async def test_a_late_transcript_carries_its_turns_trace_into_the_run_it_starts(stage: Stage) -> None:
    stage.llm.enqueue(Reply(text=""))
    turn = stage.stamp(EndOfTurn, audio_ms=1500.0, silence_ms=700.0, speech_end_ns=12_345)
    await stage.bus.publish(turn)
    words = stage.stamp(Transcript, text="Where is the window?", final=True, audio_ms=1500.0)
    await stage.bus.publish(words)
    await stage.settle()
    traced = stage.bus.tracer.stages(words.id)
    assert traced[SPEECH_END] == 12_345 and traced[TURN_ENDED] == turn.t_ns
    assert traced[TRANSCRIBED] == words.t_ns
    assert traced[DIRECTOR_RUN] <= traced[LLM_REQUEST] <= traced[LLM_DONE] <= traced[DIRECTOR_DONE]


async def test_the_tool_loop_runs_until_the_llm_stops_calling_tools(stage: Stage) -> None:
    stage.llm.enqueue(
        Reply(tool_calls=[Call("remember", {"fact": "The user's name is Ada."})]),
        Reply(tool_calls=[Call("move_to", {"place": "window"})]),
        Reply(text=""),
    )
    await stage.bus.publish(stage.stamp(TextInput, text="I'm Ada. Go to the window."))
    await stage.settle()
    assert len(stage.llm.requests) == 3
    assert await stage.director.memory() == ["The user's name is Ada."]
    assert "The user's name is Ada." in stage.llm.requests[1]["messages"][0]["content"]
    assert stage.tick(1)[0].condition.action == "walk_left"


async def test_plain_text_is_spoken(stage: Stage) -> None:
    stage.llm.enqueue(Reply(text="Nice to meet you!"))
    await stage.say("Hello")
    await stage.settle()
    assert len(stage.llm.requests) == 1
    assert stage.tick(1)[0].speech_start[0].text == "Nice to meet you!"
    history = await stage.director.history()
    assert json.loads(history[1]["tool_calls"][0]["function"]["arguments"]) == {"text": "Nice to meet you!"}


async def test_a_barge_in_cancels_the_run_in_flight(stage: Stage) -> None:
    stage.llm.enqueue(Reply(delay_s=3.0, tool_calls=[Call("say", {"text": "Let me think..."})]))
    stage.llm.enqueue(Reply(tool_calls=[Call("say", {"text": "Yes?"})]))
    await stage.say("Tell me a story.")
    async with asyncio.timeout(LIMIT_S):
        await stage.llm.wait_for_requests(1)
    epoch = stage.realizer.epoch("director")
    await stage.bus.publish(stage.stamp(SpeechStarted, audio_ms=2000.0))
    await stage.say("Actually, wait.")
    await stage.settle()
    assert stage.director.stats.cancelled == 1
    assert stage.realizer.epoch("director") == epoch + 1
    texts = [o.speech_start[0].text for o in stage.tick(3) if o.speech_start]
    assert texts == ["Yes?"]
    # The second call carries both turns; the cancelled answer never made it into the history.
    last = stage.llm.requests[1]["messages"]
    assert [m["content"] for m in last if m["role"] == "user"] == [
        'The user said: "Tell me a story."',
        'The user said: "Actually, wait."',
    ]


async def test_in_stale_mode_a_late_answer_is_dropped_at_dispatch(llm: LLMServer) -> None:
    stage = make_stage(llm, barge_in="stale")
    try:
        llm.enqueue(Reply(delay_s=0.5, tool_calls=[Call("say", {"text": "Too late!"})]))
        await stage.say("Hello?")
        async with asyncio.timeout(LIMIT_S):
            await llm.wait_for_requests(1)
        await stage.bus.publish(stage.stamp(SpeechStarted, audio_ms=2000.0))
        await stage.settle()
        assert stage.director.stats.stale == 1 and stage.director.stats.cancelled == 0
        assert [e.reason for e in stage.seen(BlockDropped)] == ["stale"]
        assert not any(o.speech_start for o in stage.tick(5))
        history = await stage.director.history()
        assert "stale" in history[-1]["content"]
    finally:
        await stage.director.stop()


async def test_history_keeps_only_what_was_heard(stage: Stage) -> None:
    story = "Once upon a time there was a cat who lived on the moon and ate cheese."
    stage.llm.enqueue(Reply(tool_calls=[Call("say", {"text": story})]), Reply(text=""))
    await stage.say("Tell me a story.")
    await stage.settle()
    stage.tick(8)  # about 1.3 s of speech plays
    stage.realizer.interrupt()  # the user barges in
    stage.tick(1)
    cut = [e for e in stage.seen(CharacterSpeech) if e.state == "interrupted"]
    assert cut and cut[0].heard_text.startswith("Once upon") and cut[0].heard_text != story
    for event in cut:
        await stage.bus.publish(event)  # what the server forwards; the Director reads it from the bus
    stage.llm.enqueue(Reply(tool_calls=[Call("say", {"text": "Sorry, go on."})]))
    await stage.say("Wait, what?")
    await stage.settle()
    sent = json.dumps(stage.llm.requests[-2]["messages"])
    assert "cheese" not in sent
    said = next(m for m in stage.llm.requests[-2]["messages"] if m.get("tool_calls"))
    assert json.loads(said["tool_calls"][0]["function"]["arguments"])["text"] == cut[0].heard_text
    assert "cut off" in stage.llm.requests[-2]["messages"][-1]["content"]


async def test_http_errors_and_malformed_streams_are_reported_retried_and_the_character_carries_on(
    stage: Stage,
) -> None:
    errors: list[DirectorError] = []
    stage.director.on_error = errors.append
    stage.llm.enqueue(
        HttpError(500), Malformed(), Reply(tool_calls=[Call("say", {"text": "There you are."})])
    )
    await stage.say("Hello?")
    outs: list[ChunkOutput] = []
    while len(stage.llm.requests) < 3 or stage.director.busy:
        outs += stage.tick(1)  # the fast loop keeps going while the Director fails
        await asyncio.sleep(0.01)
    await stage.settle()
    assert len(errors) == 2 and all(e.code == "director" and not e.fatal for e in errors)
    assert "500" in errors[0].message
    assert [e.attempt for e in stage.seen(DirectorError)] == [1, 2]
    for o in outs:
        o.condition.validate()  # raises on a condition the model cannot take
    assert any(o.speech_start for o in outs + stage.tick(2))


async def test_a_slow_endpoint_times_out_and_is_given_up_after_the_retries(llm: LLMServer) -> None:
    # The timeout leaves the request time to arrive on a loaded machine (a process's first request
    # through the client takes about 0.1 s there); the reply would come long after it.
    stage = make_stage(llm, timeout_s=1.0, retries=1)
    try:
        llm.enqueue(Reply(delay_s=60.0, text="late"), Drop())
        await stage.say("Hello?")
        await stage.settle()
        assert stage.director.stats.failed == 2
        assert [e.attempt for e in stage.director.errors] == [1, 2]
        assert stage.director.errors[0].message == "the LLM endpoint did not answer within 1 s"
        assert len(llm.requests) == 2  # one try and one retry, then it waits for the next trigger
    finally:
        await stage.director.stop()


async def test_an_endpoint_that_is_down_is_an_error_not_a_crash() -> None:
    async with LLMServer() as llm:
        port = llm.port
    bus = EventBus()
    realizer = Realizer(bus)
    config = DirectorConfig(base_url=f"http://127.0.0.1:{port}/v1", debounce_s=0.01, retries=0)
    director = Director(config, realizer, build_toolbox(MANIFEST), bus=bus)
    director.start()
    try:
        director.feed(Stamper("s")(TextInput, text="anyone there?"))
        async with asyncio.timeout(LIMIT_S):
            await director.settle()
        assert director.stats.failed == 1
        assert director.errors[0].message == "the LLM endpoint could not be reached"
        realizer.tick(0).condition.validate()
    finally:
        await director.stop()


async def test_unknown_and_malformed_tool_calls_go_back_to_the_llm_as_tool_errors(stage: Stage) -> None:
    stage.llm.enqueue(
        Reply(
            tool_calls=[Call("dance", {}), Call("say", '{"text": "Hel'), Call("perform", {"action": "fly"})]
        ),
        Reply(tool_calls=[Call("perform", {"action": "nod"})]),
    )
    await stage.say("Dance!")
    await stage.settle()
    assert stage.director.stats.failed == 0
    results = tool_messages(stage.llm.requests[1])
    assert [r["ok"] for r in results] == [False, False, False]
    assert "unknown tool 'dance'" in results[0]["error"] and results[2]["field"] == "action"
    assert stage.tick(1)[0].condition.action == "nod"


async def test_triggers_are_debounced_into_one_run(llm: LLMServer) -> None:
    stage = make_stage(llm, debounce_s=0.2)
    try:
        for text in ("one", "two", "three"):
            await stage.bus.publish(stage.stamp(TextInput, text=text))
        await stage.bus.publish(stage.stamp(Gesture, gesture="wave"))
        await stage.bus.publish(stage.stamp(SoundClass, audio_ms=1.0, label="Knock", score=0.9))
        await stage.settle()
        assert len(llm.requests) == 1
        assert llm.requests[0]["messages"][-1]["content"].splitlines() == [
            'The user typed: "one"',
            'The user typed: "two"',
            'The user typed: "three"',
            "The user made a gesture: wave",
            "A sound was heard: Knock",
        ]
    finally:
        await stage.director.stop()


async def test_every_input_folded_into_one_run_is_answered_by_its_reply(llm: LLMServer) -> None:
    # The soak found inputs neither reflected nor told why not: a run answered only the last of them.
    stage = make_stage(llm, debounce_s=0.2)
    llm.enqueue(Reply(text="Yes to all of that!"), Reply(text=""))
    try:
        inputs: list[Event] = [stage.stamp(TextInput, text=text) for text in ("one", "two")]
        inputs.append(stage.stamp(Gesture, gesture="wave"))
        for event in inputs:
            await stage.bus.publish(event)
        await stage.settle()
        assert len(llm.requests) == 1  # one run, one reply for all three
        reflected = [event_id for out in stage.tick(4) for event_id in out.reflects]
        assert sorted(reflected) == sorted(event.id for event in inputs)
    finally:
        await stage.director.stop()


async def test_inputs_a_story_rewind_leaves_unanswered_are_told_they_will_not_show(llm: LLMServer) -> None:
    stage = make_stage(llm, debounce_s=30.0)  # the run would come long after the rewind
    try:
        before = await stage.director.snapshot()
        typed = stage.stamp(TextInput, text="are you there?")
        await stage.bus.publish(typed)
        await asyncio.sleep(0)  # the Director reads it off the bus
        await stage.director.restore(before)
        told = [e for e in stage.seen(InputUnshown) if e.cause == typed.id]
        assert [e.reason for e in told] == ["stale"] and not llm.requests
    finally:
        await stage.director.stop()


async def test_a_sound_whose_run_a_story_rewind_cuts_short_is_told_it_will_not_show(llm: LLMServer) -> None:
    # A knock starts a run; the story goes back to a checkpoint while the LLM is still answering: the run
    # is cancelled, and the knock must still get its one outcome (the 10-minute soak lost exactly this).
    stage = make_stage(llm)
    try:
        before = await stage.director.snapshot()
        hold = Hold(events=1)
        llm.enqueue(Reply(tool_calls=[Call("say", {"text": "Who is there?"})], hold=hold), Reply(text=""))
        knock = stage.stamp(SoundClass, label="Knock", score=0.8, audio_ms=500.0)
        await stage.bus.publish(knock)
        async with asyncio.timeout(LIMIT_S):
            await hold.reached.wait()
        await stage.director.restore(before)
        hold.release()
        await stage.settle()
        told = [e for e in stage.seen(InputUnshown) if e.cause == knock.id]
        assert [e.reason for e in told] == ["stale"]
        assert knock.id not in [event_id for out in stage.tick(4) for event_id in out.reflects]
    finally:
        await stage.director.stop()


async def test_a_sound_the_reply_says_nothing_about_is_told_it_will_not_show(llm: LLMServer) -> None:
    # A sound is noticed, not owed: a reply with nothing usable leaves it without an acknowledgement, but
    # the client must still hear that it will not show.
    stage = make_stage(llm)
    try:
        llm.enqueue(Reply(text=""))
        clap = stage.stamp(SoundClass, label="Clapping", score=0.8, audio_ms=500.0)
        await stage.bus.publish(clap)
        await stage.settle()
        told = [e for e in stage.seen(InputUnshown) if e.cause == clap.id]
        assert [e.reason for e in told] == ["no_reaction"]
    finally:
        await stage.director.stop()


async def test_a_spoken_turn_skips_the_debounce_and_its_run_is_traced_under_it(llm: LLMServer) -> None:
    # A debounce far longer than the wait: only a turn that skips it is answered in time.
    stage = make_stage(llm, debounce_s=60.0)
    try:
        llm.enqueue(Reply(tool_calls=[Call("say", {"text": "Hi."})]), Reply(text=""))
        turn = await stage.say("Hello?")
        async with asyncio.timeout(LIMIT_S):
            await llm.wait_for_requests(2)
        await stage.settle()
        traced = stage.bus.tracer.stages(turn.id)
        order = [TURN_ENDED, DIRECTOR_RUN, LLM_REQUEST, LLM_FIRST_TOKEN, LLM_DONE, DIRECTOR_DONE]
        assert [traced[s] for s in order] == sorted(traced[s] for s in order)
    finally:
        await stage.director.stop()


async def test_a_trigger_during_a_run_waits_for_it_at_most_one_run_in_flight(stage: Stage) -> None:
    stage.llm.enqueue(Reply(delay_s=0.3, text=""), Reply(text=""))
    await stage.say("Hi")
    async with asyncio.timeout(LIMIT_S):
        await stage.llm.wait_for_requests(1)
    await stage.bus.publish(stage.stamp(Gesture, gesture="thumbs_up"))  # not a barge-in
    await asyncio.sleep(0.1)
    assert len(stage.llm.requests) == 1 and stage.director.busy
    await stage.settle()
    assert len(stage.llm.requests) == 2 and stage.director.stats.completed == 2


async def test_non_streaming_endpoints_work_too(llm: LLMServer) -> None:
    stage = make_stage(llm, stream=False)
    try:
        llm.enqueue(Reply(tool_calls=[Call("perform", {"action": "jump"})]))
        await stage.say("Jump!")
        await stage.settle()
        assert llm.requests[0].get("stream") in (None, False)
        assert stage.tick(1)[0].condition.action == "jump"
    finally:
        await stage.director.stop()


async def test_an_idle_timer_starts_a_run_after_quiet(llm: LLMServer) -> None:
    stage = make_stage(llm, idle_after_s=0.2)
    try:
        async with asyncio.timeout(LIMIT_S):
            await llm.wait_for_requests(1)
        assert "quiet" in llm.requests[0]["messages"][-1]["content"]
        await stage.settle()
        await asyncio.sleep(0.3)
        assert len(llm.requests) == 1  # once per quiet stretch
    finally:
        await stage.director.stop()


async def test_the_test_server_can_answer_every_request_from_a_function() -> None:
    def echo(request: dict[str, Any]) -> Reply:
        last = request["messages"][-1]
        if last["role"] == "tool":
            return Reply(text="")  # the tools ran: nothing more to do this turn
        said = last["content"]
        return Reply(
            tool_calls=[Call("say", {"text": f"You said {len(said)} characters."})], chunk_delay_s=0.01
        )

    async with LLMServer(default=echo) as llm:
        stage = make_stage(llm)
        try:
            await stage.say("Hello")
            await stage.settle()
            assert (
                stage.tick(1)[0].speech_start[0].text == "You said 22 characters."
            )  # for: The user said: "Hello"
            assert len(llm.requests) == 2
        finally:
            await stage.director.stop()


async def test_a_turn_is_told_once_whether_the_client_or_the_server_transcribed_it(stage: Stage) -> None:
    await stage.bus.publish(stage.stamp(Transcript, text="good morning", final=True, source="client"))
    await stage.say("good morning")
    await stage.bus.publish(stage.stamp(Transcript, text="how are", final=True))
    await stage.bus.publish(stage.stamp(EndOfTurn, audio_ms=1.0, silence_ms=500.0))
    await stage.settle()
    [told] = [m["content"] for m in stage.llm.requests[0]["messages"] if m["role"] == "user"]
    assert told.splitlines() == ['The user said: "good morning"', 'The user said: "how are"']


async def test_a_long_conversation_keeps_one_checkpoint_not_one_per_step_of_every_run(stage: Stage) -> None:
    # The checkpointer stored every step of every run (about 0.3 MiB a run with a full history): a
    # ten-minute call piled up hundreds. Only the latest state is ever read, and it is all still there.
    for i in range(12):
        stage.llm.enqueue(Reply(tool_calls=[Call("say", {"text": f"Answer {i}."})]), Reply(text=""))
        await stage.say(f"Question {i}?")
        await stage.settle()
    director = stage.director
    assert director.stats.completed == 12
    assert len(list(director._graph.compiled.get_state_history(director._graph.thread))) == 1
    history = await director.history()
    assert (
        history[-1]["role"] == "assistant"
        and {"role": "user", "content": 'The user said: "Question 11?"'} in history
    )
    assert len(history) == director.config.history_messages  # 12 turns of 4 messages, trimmed to the newest
