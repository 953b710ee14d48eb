"""Faults of the LLM endpoint (refused, hanging, HTTP 500, garbage, cut streams, huge replies): each is
reported to the client in words of its own, the character acknowledges the user once, and a retry that
succeeds still answers."""

from __future__ import annotations

import pytest

from agent.acknowledge import LABEL
from agent.llm import MAX_REPLY_CHARS, MAX_REPLY_PIECES
from agent.progress import DirectorError, DirectorPlan
from events.vocabulary import Event, TextInput
from tests.agent.stage import Stage, make_stage
from tests.support.llm_server import Answer, Call, Cut, Drop, Hang, HttpError, LLMServer, Malformed, Reply

HANG_S = 0.5
TOO_LONG = f"the LLM's reply was too long (over {MAX_REPLY_CHARS} characters or {MAX_REPLY_PIECES} pieces)"
ANSWER = Reply(tool_calls=[Call("say", {"text": "There you are."})])
FAULTS: dict[str, tuple[Answer, str]] = {
    "http 500": (
        HttpError(500, "worker crashed in /srv/llm/engine.py line 42"),
        "the LLM endpoint answered HTTP 500",
    ),
    "hang": (Hang(), f"the LLM endpoint did not answer within {HANG_S:g} s"),
    "garbage": (Malformed("<html>502 Bad Gateway</html>"), "the LLM's reply could not be read"),
    "cut stream": (Cut(ANSWER, events=3), "the LLM's reply broke off"),
    "dropped": (Drop(), "the LLM endpoint could not be reached"),
    "huge call": (Reply(tool_calls=[Call("say", {"text": "la " * MAX_REPLY_CHARS})], pieces=200), TOO_LONG),
    # Few characters, but one a chunk: parsing each costs the event loop, so their number is bounded too.
    "endless pieces": (
        Reply(tool_calls=[Call("say", {"text": "a" * (MAX_REPLY_PIECES + 9)})], pieces=10**6),
        TOO_LONG,
    ),
}


def split(stage: Stage) -> tuple[list[DirectorError], list[DirectorPlan]]:
    events = stage.seen(Event)
    notices = [e for e in events if isinstance(e, DirectorError)]
    return notices, [e for e in events if isinstance(e, DirectorPlan)]


@pytest.mark.parametrize("kind", list(FAULTS))
async def test_a_fault_is_reported_acknowledged_once_and_the_retry_answers(llm: LLMServer, kind: str) -> None:
    fault, message = FAULTS[kind]
    stage = make_stage(llm, timeout_s=HANG_S if kind == "hang" else 10.0, retries=2)
    try:
        llm.enqueue(fault, fault, ANSWER, Reply(text=""))
        await stage.bus.publish(stage.stamp(TextInput, text="Hello?"))
        await stage.settle()
        notices, plans = split(stage)
        # Each failure is told in words of our own: no library message, no path, no body of the endpoint's.
        assert [(n.message, n.attempt, n.fatal) for n in notices] == [
            (message, 1, False),
            (message, 2, False),
        ]
        # The user was acknowledged at the first failure, once; then the retry's answer came.
        assert [p.summary for p in plans] == [LABEL, "say"]
        assert stage.director.stats.acknowledged == 1 and stage.director.stats.failed == 2
        outs = stage.tick(2)
        assert outs[0].condition.action == "nod"
        assert [s.text for o in outs for s in o.speech_start] == ["There you are."]
    finally:
        await stage.director.stop()


async def test_a_refused_connection_is_reported_and_acknowledged(llm: LLMServer) -> None:
    stage = make_stage(llm, retries=0)
    try:
        await llm.refuse()
        await stage.bus.publish(stage.stamp(TextInput, text="Anyone?"))
        await stage.settle()
        notices, plans = split(stage)
        assert [n.message for n in notices] == ["the LLM endpoint could not be reached"]
        assert [p.summary for p in plans] == [LABEL]
        await llm.accept()  # back again: the next turn is answered as usual
        llm.enqueue(ANSWER, Reply(text=""))
        await stage.bus.publish(stage.stamp(TextInput, text="Now?"))
        await stage.settle()
        assert [p.summary for p in split(stage)[1]] == ["say"]
    finally:
        await stage.director.stop()
