"""Hypothesis strategies for everything a client can send: text frames and binary frames, valid and not.

Valid and mutated messages come from ``tests/support/fuzz_messages.py``; here they are encoded, and some of
the encodings garbled (truncated, characters replaced, NaN and Infinity literals, deep nesting).

``tame=True`` keeps out the inputs of the known bugs of issue 12 (``KNOWN_BUGS``), which hang the server,
end the session or leak a path; the property tests and ``benchmarks/fuzz.py`` use it against live servers,
and the tests of those bugs send them on purpose.

Text frames are ``str`` and binary frames ``bytes``: the type says which kind of WebSocket frame to send.
"""

from __future__ import annotations

import json
import random
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from server import protocol as p
from tests.support.fuzz_messages import TAME_DEPTH, mutated, valid_messages

FuzzInput = str | bytes
"""One WebSocket frame: ``str`` for a text frame, ``bytes`` for a binary one."""

KNOWN_BUGS: dict[str, str] = {
    "plan_clock": "plan loop_s like 1e-300 or at_s like -1e300 freeze the server (ScriptRunner.on_tick)",
    "idle_overflow": "idle timings like 1e308 end the session with `internal` (IdleVariety._chunks)",
    "deep_plan": "plans nested ~490 deep give `internal` (a RecursionError in agent.script._with_places)",
    "deep_json": "any message nested ~990 deep gives `internal` (a RecursionError in decode_client_text)",
    "resume_token": "a non-ASCII resume token gives `internal` (secrets.compare_digest in _resume)",
    "plan_name": "a plan name too long for a file name leaks the server's plans path in the error",
    "outcome_type": "an input no mind answers ends the session with `internal` (found by this fuzzing:"
    " `event.type` in Conductor._outcome_loop; events have no `type` attribute)",
}
"""The bugs of issue 12 this fuzzing was written against (fixed; each has its own regression test in
tests/server/test_fuzz.py); ``tame`` strategies stay clear of each, so the long live run stays quick."""

JSON_LITERALS: tuple[str, ...] = (
    "NaN",
    "Infinity",
    "-Infinity",
    "nan",
    "inf",
    "1e999",
    "-1e999",
    "undefined",
)


def encode(value: Any, ascii_only: bool = True) -> str:
    """JSON text as a client would send it (escaped non-ASCII, or raw UTF-8 where that is encodable)."""
    text = json.dumps(value, ensure_ascii=ascii_only, allow_nan=False)
    if not ascii_only:
        try:
            text.encode()
        except UnicodeEncodeError:  # lone surrogates cannot go into a UTF-8 text frame raw
            return json.dumps(value, allow_nan=False)
    return text


GARBLES = ("truncate", "replace", "insert", "literal", "duplicate", "wrap", "junk")
JUNK: tuple[str, ...] = ("", " ", "null", "[]", "1", '"ping"', "{", "}", "\ufeff{}", "{'type': 'ping'}")


def garble(text: str, how: str, at: float, char: str, depth: int, literal: str) -> str:
    """``text`` (a JSON message) broken ``how``: truncated or a ``char`` replaced or inserted at fraction
    ``at`` of its length, a ``literal`` (NaN, Infinity...) for a value, keys duplicated, ``depth`` arrays
    around it, or ``junk`` (``literal`` then is what is sent). Shared by hypothesis and ``remix``."""
    i = min(len(text) - 1, int(at * len(text))) if text else 0
    if how == "truncate":
        return text[:i]
    if how in ("replace", "insert"):
        return text[:i] + char + text[i + (how == "replace") :]
    if how == "literal" and text.endswith("}"):
        return text[:-1] + f', "n": {literal}}}'
    if how == "duplicate" and text.startswith("{"):
        return text[:-1] + ", " + text[1:]
    if how == "wrap":
        return "[" * depth + text + "]" * depth
    return literal


def garbled(text: str, tame: bool) -> st.SearchStrategy[str]:
    """``text`` garbled by ``garble`` with parameters drawn by hypothesis."""
    return st.builds(
        garble,
        st.just(text),
        st.sampled_from(GARBLES),
        st.floats(0.0, 1.0),
        st.one_of(st.sampled_from('{}[]":,\\ \x00'), st.characters(exclude_categories=["Cs"])),
        st.integers(1, TAME_DEPTH if tame else 5000),
        st.one_of(st.sampled_from(JSON_LITERALS), st.sampled_from(JUNK)),
    )


def remix(pool: list[FuzzInput], rng: random.Random, tame: bool = True) -> FuzzInput:
    """A cheap new input from a pool that hypothesis drew: one picked as it is, or garbled (text) or
    flipped, cut and re-kinded (binary) with ``rng``. For runs far longer than hypothesis draws quickly."""
    frame = rng.choice(pool)
    if rng.random() < 0.5:
        return frame
    if isinstance(frame, str):
        char = rng.choice('{}[]":,\\ \x00e-1.') if rng.random() < 0.7 else chr(rng.randrange(0xD800))
        depth = rng.randint(1, TAME_DEPTH if tame else 5000)
        return garble(frame, rng.choice(GARBLES), rng.random(), char, depth, rng.choice(JSON_LITERALS + JUNK))
    data = bytearray(frame)
    if data and rng.random() < 0.4:
        data[rng.randrange(len(data))] = rng.randrange(256)
    if rng.random() < 0.4:
        del data[rng.randrange(len(data) + 1) :]
    if data and rng.random() < 0.2:
        data[0] = rng.randrange(256)
    return bytes(data)


def _encodable(s: str) -> bool:
    try:
        s.encode()
    except UnicodeEncodeError:
        return False
    return True


def text_frames(tame: bool) -> st.SearchStrategy[str]:
    """Any text frame: valid messages, mutated ones, garbled JSON (each about a third)."""
    valid = valid_messages(tame)
    good = st.builds(encode, valid, st.booleans())
    bad = st.builds(encode, valid.flatmap(lambda m: mutated(m, tame)), st.booleans())
    broken = good.flatmap(lambda text: garbled(text, tame))
    if tame:
        broken = broken.filter(lambda s: _depth(s) < TAME_DEPTH + 20)
    # Frames over 1 MiB may close the connection (1009, as documented): the live tests keep one connection.
    return st.one_of(good, bad, broken).filter(lambda s: len(s.encode()) <= p.HARD_MAX_MESSAGE_BYTES)


def _depth(text: str) -> int:
    """An upper bound on the nesting depth of JSON text (brackets inside strings count too)."""
    depth = deepest = 0
    for c in text:
        if c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}":
            depth -= 1
    return deepest


# ----------------------------------------------------------------------------------------- binary


def pcm(samples: st.SearchStrategy[int]) -> st.SearchStrategy[bytes]:
    """PCM16 LE: silence, quiet noise, full-scale noise or extremes, ``samples`` long."""

    def make(n: int, kind: int, seed: int) -> bytes:
        import numpy as np

        rng = np.random.default_rng(seed)
        if kind == 0:
            values = np.zeros(n)
        elif kind == 1:
            values = rng.normal(0, 300, n)
        elif kind == 2:
            values = rng.uniform(-32768, 32767, n)
        else:
            values = np.where(np.arange(n) % 2, 32767, -32768)
        return values.clip(-32768, 32767).astype("<i2").tobytes()

    return st.builds(make, samples, st.integers(0, 3), st.integers(0, 2**32 - 1))


def binary_frames() -> st.SearchStrategy[bytes]:
    """Binary frames: audio of a valid size, empty, odd-length, oversize, other kind bytes, kind alone."""
    kind = bytes([p.Kind.AUDIO_IN])
    return st.one_of(
        pcm(st.one_of(st.integers(1, 640), st.integers(1, p.MAX_AUDIO_SAMPLES))).map(lambda b: kind + b),
        st.just(b""),
        st.just(kind),
        st.binary(max_size=999).map(lambda b: kind + b + b"\x00" if len(b) % 2 == 0 else kind + b),
        st.integers(p.MAX_AUDIO_SAMPLES + 1, 3 * p.MAX_AUDIO_SAMPLES).map(lambda n: kind + bytes(2 * n)),
        st.tuples(st.integers(0, 255).filter(lambda k: k != p.Kind.AUDIO_IN), st.binary(max_size=64)).map(
            lambda t: bytes([t[0]]) + t[1]
        ),
    )


def client_frames(tame: bool) -> st.SearchStrategy[FuzzInput]:
    """What a client may send once its session has started: mostly text, some binary."""
    return st.one_of(text_frames(tame), text_frames(tame), text_frames(tame), binary_frames())


# ----------------------------------------------------------------------------------------- drawing


def draw_examples(strategy: st.SearchStrategy[Any], n: int, seed: int) -> list[Any]:
    """Up to ``n`` examples of ``strategy`` from hypothesis's own engine, the same for the same ``seed``.

    For a live server over one connection: a ``@given`` test cannot await a WebSocket, so hypothesis
    generates in a pass that only collects (no shrinking: a failure names the very input sent), and the
    caller sends them. Hypothesis still steers towards its edge cases (empty, boundaries, duplicates).
    """
    out: list[Any] = []

    @settings(
        max_examples=n,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @hypothesis_seed(seed)
    @given(strategy)
    def collect(example: Any) -> None:
        out.append(example)

    collect()
    return out


def describe(frame: FuzzInput, limit: int = 300) -> str:
    """A short printable form of an input for a failure message."""
    text = repr(frame)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(frame)} {type(frame).__name__})"
