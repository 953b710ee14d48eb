"""The Director's message history as the next LLM call sends it: tool calls a cancelled run left without
results are answered, speech that was cut says only what was heard, and the oldest messages go."""

from __future__ import annotations

import json
from typing import Any

_CANCELLED_RESULT = json.dumps({"ok": False, "error": "not run: the user spoke first"})


def close_dangling_calls(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Answer tool calls that a cancelled run left without results (the API requires an answer each)."""
    out: list[dict[str, Any]] = []
    waiting: list[str] = []
    for message in messages:
        if message["role"] == "tool":
            if message.get("tool_call_id") in waiting:
                waiting.remove(message["tool_call_id"])
        else:
            out += [{"role": "tool", "tool_call_id": cid, "content": _CANCELLED_RESULT} for cid in waiting]
            waiting = [c["id"] for c in message.get("tool_calls") or []]
        out.append(message)
    out += [{"role": "tool", "tool_call_id": cid, "content": _CANCELLED_RESULT} for cid in waiting]
    return out


def rewrite_to_heard(messages: list[dict[str, Any]], call_id: str, heard: str) -> None:
    """Make the ``say`` call ``call_id`` say only ``heard``, and note the cut in its result."""
    for message in messages:
        for call in message.get("tool_calls") or []:
            if call["id"] == call_id:
                try:
                    arguments = json.loads(call["function"]["arguments"])
                except json.JSONDecodeError:
                    arguments = {}
                arguments["text"] = heard
                call["function"]["arguments"] = json.dumps(arguments)
        if message["role"] == "tool" and message.get("tool_call_id") == call_id:
            message["content"] = json.dumps({"ok": True, "interrupted": True, "heard_text": heard})


def trim(messages: list[dict[str, Any]], keep: int) -> list[dict[str, Any]]:
    """The last ``keep`` messages or so, starting at a user message (never with orphaned tool results)."""
    if len(messages) <= keep:
        return messages
    users = [i for i, m in enumerate(messages) if m["role"] == "user"]
    inside = [i for i in users if i >= len(messages) - keep]
    if inside:
        return messages[inside[0] :]
    return messages[users[-1] :] if users else messages
