"""A catalogue of what an LLM endpoint may do wrong, for ``LLMServer``: the fault tests and
``benchmarks/llm_faults.py`` use the same kinds.

Each kind has the answer to a turn's first call and to a follow-up call (the one that carries tool
results: a model that got it wrong once usually gets it wrong again), and what the user must get: the
character speaking, or a ``director`` notice plus an acknowledgement. ``refused`` has no answer: the
caller closes the port (``LLMServer.refuse``) for that turn.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from agent.acknowledge import LABEL
from agent.llm import MAX_REPLY_CHARS, MAX_REPLY_PIECES
from tests.support.llm_server import Answer, Call, Cut, Hang, HttpError, Malformed, Reply

Outcome = Literal["spoken", "acknowledged"]
SAY = Reply(tool_calls=[Call("say", {"text": "Hello! Nice to see you."})])
DONE = Reply(text="")


@dataclass(frozen=True)
class Fault:
    """One kind of reply: the first answer, the follow-up's, and what the user must get."""

    first: Answer | None
    follow_up: Answer
    outcome: Outcome


def _twice(answer: Answer) -> Fault:
    return Fault(answer, answer, "acknowledged")


FAULTS: dict[str, Fault] = {
    "say (control)": Fault(SAY, DONE, "spoken"),
    "plain text": Fault(Reply(text="Hello there! Nice to see you."), DONE, "spoken"),
    "empty message": _twice(Reply(text="")),
    "truncated call": _twice(Reply(tool_calls=[Call("say", '{"text": "Hel')], finish_reason="length")),
    "garbled call": _twice(Reply(tool_calls=[Call("say", "<|tool_call|>say(text=hi)")])),
    "unknown tool": _twice(Reply(tool_calls=[Call("teleport", {"where": "moon"})])),
    "invalid twice": _twice(Reply(tool_calls=[Call("say", {"text": "x" * 700})])),
    "refused": Fault(None, DONE, "acknowledged"),
    "hang": _twice(Hang()),
    "http 500": _twice(HttpError(500)),
    "garbage": _twice(Malformed("<html>502 Bad Gateway</html>")),
    "cut stream": _twice(Cut(SAY, events=3)),
    "huge call": _twice(Reply(tool_calls=[Call("say", {"text": "la " * MAX_REPLY_CHARS})], pieces=200)),
    "endless pieces": _twice(
        Reply(tool_calls=[Call("say", {"text": "a" * (MAX_REPLY_PIECES + 9)})], pieces=10**6)
    ),
}


class FaultyEndpoint:
    """An ``LLMServer`` responder answering every call as the fault ``kind`` (set it between turns)."""

    def __init__(self, kind: str = "say (control)") -> None:
        self.kind = kind

    def __call__(self, request: dict[str, Any]) -> Answer:
        fault = FAULTS[self.kind]
        if request["messages"][-1]["role"] == "tool" or fault.first is None:
            return fault.follow_up
        return fault.first


def outcome(messages: list[dict[str, Any]]) -> Outcome | None:
    """What the user got from these server messages: a notice with an acknowledgement (which may speak a
    line of the script's), speech, or None."""
    notice = any(m["type"] == "error" and m["code"] == "director" and not m["fatal"] for m in messages)
    if notice and any(m["type"] == "director.plan" and m["summary"] == LABEL for m in messages):
        return "acknowledged"
    if any(m["type"] == "character.speech" and m["state"] == "started" for m in messages):
        return "spoken"
    return None
