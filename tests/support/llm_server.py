"""A real local HTTP server speaking the OpenAI chat-completions protocol, scripted per test.

It listens on 127.0.0.1 on an ephemeral port (``asyncio.start_server``, HTTP/1.1 with keep-alive) and
answers ``POST /v1/chat/completions`` from a queue of scripted answers: plain ``Reply`` objects (text
and/or tool calls, streamed as SSE when the request asks for ``stream``, with tool-call arguments split
over several chunks), ``HttpError``, ``Malformed`` bodies, ``Drop`` (close without answering), ``Hang``
(never answer), and ``Cut`` (a streamed reply whose connection dies part-way). Any answer can be delayed,
and a streamed reply held part-way until the test lets it go on (``Reply.hold``: a ``Hold``), so a test
can tell what happened while the reply was still streaming.
``refuse()`` closes the port and every connection (connections are then refused) until ``accept()``.
Every request body is recorded, so a test can check what the client sent.

    async with LLMServer() as llm:
        llm.enqueue(Reply(tool_calls=[Call("say", {"text": "Hi"})]), Reply(text="done"))
        client = openai.AsyncOpenAI(base_url=llm.base_url, api_key="test")
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Call:
    """A tool call in a reply; ``arguments`` may be a dict (sent as JSON) or raw text (maybe broken)."""

    name: str
    arguments: dict[str, Any] | str = field(default_factory=dict)
    id: str | None = None

    def arguments_text(self) -> str:
        return self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments)


@dataclass
class Hold:
    """Holds a streamed reply after its first ``events`` SSE events (the role chunk is the first) until
    ``release()``; ``reached`` is set once it is held there."""

    events: int = 2
    reached: asyncio.Event = field(default_factory=asyncio.Event)
    _go: asyncio.Event = field(default_factory=asyncio.Event)

    def release(self) -> None:
        """Let the reply stream on."""
        self._go.set()


@dataclass
class Reply:
    """A successful answer. ``pieces``: how many SSE chunks each text or arguments string is cut into.

    delay_s: wait before the response headers; chunk_delay_s: wait between streamed chunks.
    finish_reason: what the last chunk says (default ``tool_calls`` or ``stop``; ``length`` for a reply cut
    by ``max_tokens``).
    """

    text: str = ""
    tool_calls: list[Call] = field(default_factory=list)
    pieces: int = 3
    delay_s: float = 0.0
    chunk_delay_s: float = 0.0
    finish_reason: str | None = None
    hold: Hold | None = None
    """Streamed, the reply stops part-way until it is released."""

    def finish(self) -> str:
        return self.finish_reason or ("tool_calls" if self.tool_calls else "stop")


@dataclass
class HttpError:
    """An HTTP error status with an OpenAI-style error body."""

    status: int = 500
    message: str = "internal error"
    delay_s: float = 0.0


@dataclass
class Malformed:
    """A 200 answer whose body (or, streamed, whose first SSE event) is ``raw``, not valid JSON."""

    raw: str = '{"choices": [ {"delta": '
    delay_s: float = 0.0


@dataclass
class Drop:
    """Close the connection without answering (an endpoint that dies mid-request)."""

    delay_s: float = 0.0


@dataclass
class Hang:
    """Accept the request and never answer (until the client gives up or the server closes)."""

    delay_s: float = 0.0


@dataclass
class Cut:
    """Stream the first ``events`` SSE events of ``reply``, then close the connection (no ``[DONE]``, no
    end of the chunked body): a stream cut by a crash or a network fault."""

    reply: Reply
    events: int = 2
    delay_s: float = 0.0


Answer = Reply | HttpError | Malformed | Drop | Hang | Cut
Responder = Callable[[dict[str, Any]], Answer]
"""Makes the answer to a request from its body: a default for endless runs (benchmarks)."""

_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    429: "Too Many Requests",
    500: "Internal Server Error",
}


def _split(text: str, pieces: int) -> list[str]:
    if not text:
        return []
    size = max(1, -(-len(text) // max(1, pieces)))
    return [text[i : i + size] for i in range(0, len(text), size)]


class LLMServer:
    """The scripted chat-completions endpoint. Use as ``async with LLMServer() as llm``."""

    def __init__(self, default: Answer | Responder | None = None) -> None:
        self.default: Answer | Responder = default if default is not None else Reply(text="")
        self.requests: list[dict[str, Any]] = []
        self._answers: deque[Answer] = deque()
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self._ids = itertools.count(1)
        self._arrived = asyncio.Event()
        self.port = 0

    @property
    def base_url(self) -> str:
        """What to give ``openai.AsyncOpenAI(base_url=...)``."""
        return f"http://127.0.0.1:{self.port}/v1"

    def enqueue(self, *answers: Answer) -> None:
        """Answer the next requests with ``answers``, in order (then with ``default``, an answer or a
        function of the request body)."""
        self._answers.extend(answers)

    @property
    def pending(self) -> int:
        """Scripted answers not used yet."""
        return len(self._answers)

    def asked(self, width: int = 160) -> list[str]:
        """The last message of each request so far, cut to ``width`` characters: what a failing test
        says the endpoint was asked."""
        return [str(r["messages"][-1].get("content"))[:width] for r in self.requests if r.get("messages")]

    async def wait_for_requests(self, count: int) -> list[dict[str, Any]]:
        """Wait until at least ``count`` requests have arrived (wrap in ``asyncio.timeout``)."""
        while len(self.requests) < count:
            self._arrived.clear()
            await self._arrived.wait()
        return self.requests

    async def start(self) -> LLMServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            # Connection handlers end quietly when cancelled, so closing never leaves one behind.
            handlers = list(self._handlers)
            for task in handlers:
                task.cancel()
            await asyncio.gather(*handlers, return_exceptions=True)
            await self._server.wait_closed()
            self._server = None

    async def refuse(self) -> None:
        """Stop listening and close every connection: new connections to the port are refused (the
        client's kept-alive ones are gone too) until ``accept``."""
        await self.close()

    async def accept(self) -> None:
        """Listen on the same port again after ``refuse``."""
        if self._server is None:
            await self.start()

    async def __aenter__(self) -> LLMServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------------------------------ HTTP

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None  # a handler runs as its own task
        self._handlers.add(task)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {
                    k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:] if h)
                }
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                if not await self._route(method, path, body, writer):
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass  # the client went away (a cancelled request closes its connection)
        except RuntimeError:
            if not writer.is_closing():
                raise
            # uvloop's way of saying the same: a write to a connection the client has closed
        except asyncio.CancelledError:
            pass  # the server is closing; a handler that ends cancelled is logged as an error by asyncio
        finally:
            self._handlers.discard(task)
            writer.close()

    async def _route(self, method: str, path: str, body: bytes, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; False when the connection must close."""
        if method == "GET" and path.rstrip("/").endswith("/models"):
            await self._send(
                writer, 200, json.dumps({"object": "list", "data": [{"id": "test-model", "object": "model"}]})
            )
            return True
        if method != "POST" or not path.rstrip("/").endswith("/chat/completions"):
            await self._send(writer, 404, json.dumps({"error": {"message": f"no route {method} {path}"}}))
            return True
        request = json.loads(body or b"{}")
        self.requests.append(request)
        self._arrived.set()
        if self._answers:
            answer = self._answers.popleft()
        else:
            answer = self.default(request) if callable(self.default) else self.default
        if answer.delay_s:
            await asyncio.sleep(answer.delay_s)
        model = request.get("model", "test-model")
        if isinstance(answer, Drop):
            return False
        if isinstance(answer, Hang):
            await asyncio.Event().wait()  # until the connection handler is cancelled
            return False
        if isinstance(answer, Cut):
            events = [json.dumps(c) for c in self._chunks(answer.reply, model)]
            await self._stream(writer, events[: answer.events], answer.reply.chunk_delay_s, end=False)
            return False
        if isinstance(answer, HttpError):
            error = {"error": {"message": answer.message, "type": "server_error", "code": None}}
            await self._send(writer, answer.status, json.dumps(error))
            return True
        if isinstance(answer, Malformed):
            if request.get("stream"):
                await self._stream(writer, [answer.raw], 0.0)
            else:
                await self._send(writer, 200, answer.raw)
            return True
        if request.get("stream"):
            await self._stream(
                writer,
                [json.dumps(c) for c in self._chunks(answer, model)],
                answer.chunk_delay_s,
                hold=answer.hold,
            )
        else:
            await self._send(writer, 200, json.dumps(self._completion(answer, model)))
        return True

    async def _send(self, writer: asyncio.StreamWriter, status: int, body: str) -> None:
        data = body.encode()
        writer.write(
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(data)}\r\nconnection: keep-alive\r\n\r\n".encode()
            + data
        )
        await writer.drain()

    async def _stream(
        self,
        writer: asyncio.StreamWriter,
        events: list[str],
        delay_s: float,
        *,
        end: bool = True,
        hold: Hold | None = None,
    ) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
            b"transfer-encoding: chunked\r\nconnection: keep-alive\r\n\r\n"
        )
        for n, event in enumerate([*events, "[DONE]"] if end else events):
            if hold is not None and n == hold.events:
                hold.reached.set()
                await hold._go.wait()
            payload = f"data: {event}\n\n".encode()
            writer.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")
            await writer.drain()
            if delay_s:
                await asyncio.sleep(delay_s)
        if end:
            writer.write(b"0\r\n\r\n")
            await writer.drain()

    # ------------------------------------------------------------------------------- payloads

    def _call_ids(self, answer: Reply) -> list[str]:
        return [call.id or f"call_{next(self._ids)}" for call in answer.tool_calls]

    def _completion(self, answer: Reply, model: str) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": answer.text or None}
        if answer.tool_calls:
            message["tool_calls"] = [
                {"id": cid, "type": "function", "function": {"name": c.name, "arguments": c.arguments_text()}}
                for cid, c in zip(self._call_ids(answer), answer.tool_calls, strict=True)
            ]
        return {
            "id": f"chatcmpl-{next(self._ids)}",
            "object": "chat.completion",
            "created": 0,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": answer.finish(),
                }
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }

    def _chunks(self, answer: Reply, model: str) -> list[dict[str, Any]]:
        cid = f"chatcmpl-{next(self._ids)}"

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": 0,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }

        out = [chunk({"role": "assistant", "content": ""})]
        out += [chunk({"content": piece}) for piece in _split(answer.text, answer.pieces)]
        for index, (call_id, call) in enumerate(zip(self._call_ids(answer), answer.tool_calls, strict=True)):
            head = {
                "index": index,
                "id": call_id,
                "type": "function",
                "function": {"name": call.name, "arguments": ""},
            }
            out.append(chunk({"tool_calls": [head]}))
            for piece in _split(call.arguments_text(), answer.pieces):
                out.append(chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}))
        out.append(chunk({}, answer.finish()))
        return out
