"""Feeding fuzzed inputs to one live session and judging every answer (the property tests and
``benchmarks/fuzz.py`` share it).

Each input is followed by a ``ping`` probe. The server handles a connection's frames in order and sends its
control messages in order, so the direct answers to the input (``error``, ``input.accepted``, ``pong``) are
exactly those that arrive before the probe's ``pong``. What the answer must be comes from decoding the
same input in-process with ``server.protocol``: an input it refuses gets an ``error`` with the same code
and ``ref``; a valid message gets its acknowledgement or a non-fatal ``error`` that echoes its ``ref``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from server import protocol as p
from server.client import SessionClient
from tests.support.fuzzing import FuzzInput, describe

ROOT = str(Path(p.__file__).resolve().parent.parent)
"""The server's code lives here; no error message may name it (nor any traceback)."""
LEAK_MARKERS = (ROOT, "Traceback", "site-packages")

ANSWER_S = 10.0
"""How long an input's probe may take to come back (a live server answers in milliseconds)."""
CLOSE_TOO_BIG = 1009
STREAM_S = 2.0
"""Frames must keep coming: at every check a new one arrives within this."""


@dataclass
class Tally:
    """What a run of inputs came to."""

    inputs: int = 0
    errors: int = 0
    accepted: int = 0
    problems: list[str] = field(default_factory=list)
    stalls: int = 0  # checks at which no new frame came within STREAM_S
    closed: str | None = None  # why the connection ended, if it did


def expectation(frame: FuzzInput) -> tuple[str, Any]:
    """("error", ProtocolError), ("message", ClientMessage) or ("audio", None), as the server decodes it."""
    try:
        if isinstance(frame, bytes):
            p.decode_audio_in(frame)
            return "audio", None
        return "message", p.decode_client_text(frame)
    except p.ProtocolError as exc:
        return "error", exc


def judge(frame: FuzzInput, answers: list[dict[str, Any]]) -> str | None:
    """What is wrong with ``answers`` (the direct answers to ``frame``), or None when they are right."""
    for answer in answers:
        if answer["type"] == "error" and answer["fatal"]:
            return f"fatal {answer['code']}: {answer['message'][:200]}"
        message = answer.get("message", "")
        if any(marker in message for marker in LEAK_MARKERS):
            return f"the error names the server's inside: {message[:300]}"
    kind, decoded = expectation(frame)
    if kind == "audio":
        if answers and [a.get("code") for a in answers] != [p.ErrorCode.RATE_LIMITED]:
            return f"valid audio answered with {answers}"
        return None
    if isinstance(decoded, p.InputLandmarks) and not answers:
        return None  # a camera frame, like audio, is answered only when refused
    if len(answers) != 1:
        return f"{len(answers)} answers where one was due: {[_short(a) for a in answers]}"
    (answer,) = answers
    want: tuple[str, str | None, str | None]
    if kind == "error":
        want = ("error", str(decoded.code), decoded.ref)
    elif isinstance(decoded, p.Ping):
        want = ("pong", None, decoded.ref)
    elif answer["type"] == "error":
        want = ("error", answer["code"], decoded.ref)
    else:
        want = ("input.accepted", None, decoded.ref)
    got = (answer["type"], answer.get("code"), answer.get("ref"))
    if got != want:
        return f"answered {got}, expected {want}"
    return None


def _size(frame: FuzzInput) -> int:
    return len(frame.encode() if isinstance(frame, str) else frame)


def _short(answer: dict[str, Any]) -> str:
    return json.dumps(answer)[:200]


def _direct(message: dict[str, Any]) -> bool:
    """An answer to a client message (not a report the session sends on its own)."""
    kind = message.get("type")
    if kind == "error":
        return message.get("code") != p.ErrorCode.DIRECTOR
    return kind in ("input.accepted", "pong", "session.started")


class FuzzFeeder:
    """Sends inputs to one started session and judges each; checks every ``check_every`` inputs that
    frames still arrive. ``trim`` drops what was judged from the client's records (for long runs)."""

    def __init__(self, client: SessionClient, check_every: int = 100, trim: bool = False) -> None:
        self.client = client
        self.check_every = check_every
        self.trim = trim
        self.tally = Tally()
        self._probe = 0

    async def feed(self, frame: FuzzInput) -> str | None:
        """Send one input and its probe; returns the problem with its answers, if any (also tallied)."""
        client, tally = self.client, self.tally
        assert client.ws is not None
        if tally.closed is not None:
            return tally.closed
        since = len(client.received.messages)
        self._probe += 1
        ref = f"fuzz-probe-{self._probe}"
        tally.inputs += 1
        try:
            await client.ws.send(frame)
            await client.ws.send(json.dumps({"type": "ping", "ref": ref}))
            await client.wait_for(lambda m: m.get("type") == "pong" and m.get("ref") == ref, ANSWER_S, since)
        except Exception as exc:  # closed, or no answer in time: either way the session is lost
            code = client.ws.close_code
            tally.closed = f"after {describe(frame)}: {type(exc).__name__} (close code {code})"
            if code == CLOSE_TOO_BIG and _size(frame) > p.HARD_MAX_MESSAGE_BYTES:
                return None  # docs/protocol.md: a frame over 1 MiB may close the connection with 1009
            tally.problems.append(tally.closed)
            return tally.closed
        messages = [m for _, m in client.received.messages[since:]]
        probe = next(i for i, m in enumerate(messages) if m.get("type") == "pong" and m.get("ref") == ref)
        answers = [m for m in messages[:probe] if _direct(m)]
        tally.errors += sum(1 for a in answers if a["type"] == "error")
        tally.accepted += sum(1 for a in answers if a["type"] == "input.accepted")
        problem = judge(frame, answers)
        if problem is not None:
            tally.problems.append(f"{describe(frame)} -> {problem}")
        if self.trim:
            del client.received.messages[:]
        if tally.inputs % self.check_every == 0:
            await self.check_streaming()
        return problem

    async def check_streaming(self) -> None:
        """A new video frame must arrive within ``STREAM_S``."""
        video = self.client.received.video
        last = video[-1].header["seq"] if video else -1
        started = time.monotonic()
        try:
            await self.client.wait_frame(lambda f: f.header["seq"] > last, STREAM_S)
        except TimeoutError:
            self.tally.stalls += 1
            self.tally.problems.append(
                f"no new frame within {STREAM_S} s after {self.tally.inputs} inputs"
                f" (waited {time.monotonic() - started:.1f} s)"
            )
        if self.trim:
            del video[:-1]
            del self.client.received.audio[:]
