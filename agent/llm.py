"""One chat-completions call with tools, streamed or not, assembled into a single assistant turn.

Streaming tool calls arrive as deltas: the first delta of a call carries its index, id and name, later
ones carry pieces of its JSON arguments. They are joined by index; nothing here parses the arguments
(the tools validate them and answer the LLM with an error when they are broken).
"""

from __future__ import annotations

import itertools
from typing import Any

import msgspec
import openai

_ids = itertools.count(1)


class ToolCall(msgspec.Struct, frozen=True):
    """One tool call as the LLM sent it (``arguments`` is raw text, possibly not valid JSON)."""

    id: str
    name: str
    arguments: str


class AssistantTurn(msgspec.Struct, frozen=True):
    """The LLM's answer: text and/or tool calls."""

    text: str
    tool_calls: list[ToolCall]
    finish_reason: str | None = None

    def message(self) -> dict[str, Any]:
        """The turn as a chat message for the history."""
        message: dict[str, Any] = {"role": "assistant", "content": self.text or None}
        if self.tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in self.tool_calls
            ]
        return message


async def complete(
    client: openai.AsyncOpenAI,
    *,
    model: str,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    stream: bool = True,
    temperature: float | None = None,
    max_tokens: int | None = None,
) -> AssistantTurn:
    """Ask the endpoint for the next assistant turn. Errors (HTTP, network, bad JSON) propagate."""
    options: dict[str, Any] = {"model": model, "messages": messages}
    if tools:
        options["tools"] = tools
        options["tool_choice"] = "auto"
    if temperature is not None:
        options["temperature"] = temperature
    if max_tokens is not None:
        options["max_tokens"] = max_tokens
    if not stream:
        response = await client.chat.completions.create(**options)
        choice = response.choices[0]
        calls = [
            ToolCall(c.id or f"call_{next(_ids)}", c.function.name, c.function.arguments or "")
            for c in choice.message.tool_calls or []
            if getattr(c, "function", None) is not None
        ]
        return AssistantTurn(choice.message.content or "", calls, choice.finish_reason)

    text: list[str] = []
    parts: dict[int, dict[str, Any]] = {}
    finish: str | None = None
    response_stream = await client.chat.completions.create(stream=True, **options)
    async with response_stream:
        async for chunk in response_stream:
            if not chunk.choices:
                continue
            choice = chunk.choices[0]
            finish = choice.finish_reason or finish
            delta = choice.delta
            if delta is None:
                continue
            if delta.content:
                text.append(delta.content)
            for piece in delta.tool_calls or []:
                part = parts.setdefault(piece.index, {"id": None, "name": "", "arguments": []})
                if piece.id:
                    part["id"] = piece.id
                if piece.function is not None:
                    if piece.function.name:
                        part["name"] += piece.function.name
                    if piece.function.arguments:
                        part["arguments"].append(piece.function.arguments)
    calls = [
        ToolCall(p["id"] or f"call_{next(_ids)}", p["name"], "".join(p["arguments"]))
        for _, p in sorted(parts.items())
    ]
    return AssistantTurn("".join(text), calls, finish)
