"""One chat-completions call with tools, streamed or not, assembled into a single assistant turn.

Streaming tool calls arrive as deltas: the first delta of a call carries its index, id and name, later
ones carry pieces of its JSON arguments. They are joined by index; nothing here parses the arguments
(the tools validate them and answer the LLM with an error when they are broken).

A reply longer than ``MAX_REPLY_CHARS``, or streamed in more than ``MAX_REPLY_PIECES`` chunks, is cut
off and is an error (``ReplyTooLong``): the tools would refuse it anyway, and reading it on would only
cost the event loop (parsing one chunk takes about 0.15 ms of its time). ``describe_failure`` says in a
sentence for the client what went wrong with a call, without the library's own message.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Callable
from typing import Any

import msgspec
import openai
from openai.types.chat import ChatCompletionChunk

from agent.director_config import DirectorConfig

_ids = itertools.count(1)

StreamWatcher = Callable[[str, str | None, str], bool]
"""Called as a streamed reply grows, with its text so far and the name and arguments so far of its first
tool call (None, "" before one starts); it returns True once it wants no more calls (each call joins
what has arrived, so a watcher stops as soon as it has what it needs)."""

MAX_REPLY_CHARS = 64 * 1024
"""Text and tool-call arguments of one reply, together: far above what ``max_tokens`` lets a model say."""
MAX_REPLY_PIECES = 1024
"""Streamed chunks of one reply (local servers send about one a token; ``max_tokens`` is 400 by default)."""

YIELD_EVERY = 32
"""Streamed chunks between two yields to the event loop: chunks already buffered are parsed without a
pause, so a fast endpoint would otherwise hold the loop (and the frames) for a whole network read."""


class ReplyTooLong(Exception):
    """The reply went past ``MAX_REPLY_CHARS``; the rest was not read."""

    def __init__(self) -> None:
        super().__init__(
            f"the LLM's reply was too long (over {MAX_REPLY_CHARS} characters or {MAX_REPLY_PIECES} pieces)"
        )


class ReplyBrokeOff(Exception):
    """A streamed reply had begun when its connection failed."""

    def __init__(self) -> None:
        super().__init__("the LLM's reply broke off")


def chat_client(config: DirectorConfig) -> openai.AsyncOpenAI:
    """A client of ``config``'s endpoint. One serves any number of Directors (a server shares one: making
    it builds an SSL context, tens of milliseconds on the event loop, and each has its connection pool)."""
    return openai.AsyncOpenAI(
        base_url=config.base_url,
        # Local servers (vLLM, Ollama, llama.cpp) take any key, but the client insists on one.
        api_key=config.api_key or "not-needed",
        max_retries=0,
        timeout=config.timeout_s,
    )


def describe_failure(exc: BaseException, timeout_s: float) -> str:
    """What went wrong with one LLM call, in words fit for the client (no library message, no address)."""
    if isinstance(exc, TimeoutError | openai.APITimeoutError):
        return f"the LLM endpoint did not answer within {timeout_s:g} s"
    if isinstance(exc, openai.APIConnectionError):
        return "the LLM endpoint could not be reached"
    if isinstance(exc, openai.APIStatusError):
        return f"the LLM endpoint answered HTTP {exc.status_code}"
    if isinstance(exc, ReplyTooLong | ReplyBrokeOff):
        return str(exc)
    return "the LLM's reply could not be read"


class ToolCall(msgspec.Struct, frozen=True):
    """One tool call as the LLM sent it (``arguments`` is raw text, possibly not valid JSON)."""

    id: str
    name: str
    arguments: str

    def message(self) -> dict[str, Any]:
        """The call as an entry of an assistant message's ``tool_calls``."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


class AssistantTurn(msgspec.Struct, frozen=True):
    """The LLM's answer: text and/or tool calls."""

    text: str
    tool_calls: list[ToolCall]
    finish_reason: str | None = None

    def message(self) -> dict[str, Any]:
        """The turn as a chat message for the history."""
        message: dict[str, Any] = {"role": "assistant", "content": self.text or None}
        if self.tool_calls:
            message["tool_calls"] = [c.message() for c in self.tool_calls]
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
    on_first_token: Callable[[], None] | None = None,
    watch: StreamWatcher | None = None,
) -> AssistantTurn:
    """Ask the endpoint for the next assistant turn; ``on_first_token`` is called when the first piece of
    it (text or a tool call) arrives (with the whole answer, unstreamed), ``watch`` as a streamed one
    grows (``StreamWatcher``). Errors (HTTP, network, bad JSON, ``ReplyTooLong``, ``ReplyBrokeOff``)
    propagate."""
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
        if on_first_token is not None:
            on_first_token()
        choice = response.choices[0]
        calls = [
            ToolCall(c.id or f"call_{next(_ids)}", c.function.name, c.function.arguments or "")
            for c in choice.message.tool_calls or []
            if getattr(c, "function", None) is not None
        ]
        text = choice.message.content or ""
        if len(text) + sum(len(c.arguments) + len(c.name) for c in calls) > MAX_REPLY_CHARS:
            raise ReplyTooLong()
        return AssistantTurn(text, calls, choice.finish_reason)

    response_stream = await client.chat.completions.create(stream=True, **options)
    try:
        async with response_stream:
            return await _assemble(response_stream, on_first_token, watch)
    except openai.APITimeoutError:
        raise
    except openai.APIConnectionError as exc:
        raise ReplyBrokeOff() from exc


async def _assemble(
    response_stream: AsyncIterator[ChatCompletionChunk],
    on_first_token: Callable[[], None] | None = None,
    watch: StreamWatcher | None = None,
) -> AssistantTurn:
    """Join a stream's deltas into one turn (yielding to the loop as it goes; see ``YIELD_EVERY``);
    ``on_first_token`` is called at the first delta with text or a tool call, ``watch`` after each delta
    that adds to the reply until it says it has seen enough."""
    text: list[str] = []
    parts: dict[int, dict[str, Any]] = {}
    finish: str | None = None
    size = count = 0
    async for chunk in response_stream:
        count += 1
        if count % YIELD_EVERY == 0:
            await asyncio.sleep(0)
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        finish = choice.finish_reason or finish
        delta = choice.delta
        if delta is None:
            continue
        if on_first_token is not None and (delta.content or delta.tool_calls):
            on_first_token()
            on_first_token = None
        if delta.content:
            text.append(delta.content)
            size += len(delta.content)
        for piece in delta.tool_calls or []:
            part = parts.setdefault(piece.index, {"id": None, "name": "", "arguments": []})
            if piece.id:
                part["id"] = piece.id
            if piece.function is not None:
                if piece.function.name:
                    part["name"] += piece.function.name
                    size += len(piece.function.name)
                if piece.function.arguments:
                    part["arguments"].append(piece.function.arguments)
                    size += len(piece.function.arguments)
        if size > MAX_REPLY_CHARS or count > MAX_REPLY_PIECES:
            raise ReplyTooLong()  # the caller's ``async with`` closes the stream unread
        if watch is not None and (delta.content or delta.tool_calls):
            first = parts[min(parts)] if parts else None
            name = first["name"] if first is not None else None
            if watch("".join(text), name, "".join(first["arguments"]) if first is not None else ""):
                watch = None
    calls = [
        ToolCall(p["id"] or f"call_{next(_ids)}", p["name"], "".join(p["arguments"]))
        for _, p in sorted(parts.items())
    ]
    return AssistantTurn("".join(text), calls, finish)
