"""Hostile input against a real server: plans and messages that once froze the server, ended a session with
``internal`` or showed the server's paths. Each is now a non-fatal error naming the input, and the session
(and every other) carries on."""

from __future__ import annotations

import asyncio
import json
import sys
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from agent.bounds import (
    MAX_JSON_DEPTH,
    MAX_LIVE_BEHAVIORS,
    MAX_LIVE_BLOCKS,
    MAX_SCRIPT_BEHAVIORS,
    largest_plan,
)
from agent.script import PLANS_DIR
from server.app import OnstageServer
from server.client import SessionClient

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))  # the benchmarks' own module layout
from served import served, session_url

pytestmark = pytest.mark.asyncio(loop_scope="module")

GAZE: dict[str, Any] = {"kind": "gaze", "x": 0.1, "y": 0.1}


def plan(**fields: Any) -> dict[str, Any]:
    """A one-entry plan (a gaze at the start) with ``fields`` on top."""
    return {"name": "x", "timeline": [{"at_s": 0, "behaviors": [GAZE]}], **fields}


def nested(depth: int) -> str:
    """JSON text of ``depth`` arrays, one in the other (built as text: encoders have recursion limits)."""
    return "[" * depth + "0" + "]" * depth


def with_nested(message: dict[str, Any], depth: int) -> str:
    """``message`` as JSON text, with its string ``"NESTED"`` replaced by ``nested(depth)``."""
    return json.dumps(message).replace('"NESTED"', nested(depth))


async def send_text(client: SessionClient, text: str) -> None:
    """Send ``text`` as it is (hostile messages are built as text)."""
    assert client.ws is not None
    await client.ws.send(text)


async def carries_on(client: SessionClient, chunks: int = 4) -> None:
    """The session still answers and still streams: ``chunks`` more chunks arrive after a ping."""
    last = client.received.video[-1].header["chunk"] if client.received.video else 0
    await client.send({"type": "ping", "ref": "alive"})
    await client.wait_type("pong", ref="alive", timeout=10)
    await client.wait_frame(lambda f: f.header["chunk"] >= last + chunks, timeout=30)


async def answer_to(client: SessionClient, ref: str) -> dict[str, Any]:
    """The server's answer to the message sent with ``ref``: an ``error`` or ``input.accepted``."""
    return await client.wait_for(
        lambda m: m.get("ref") == ref and m.get("type") in ("error", "input.accepted"), 10
    )


# ---------------------------------------------------------------------- a plan that froze the whole server
# In a server process of its own: a frozen event loop there shows here as a timeout, not as a hung test.


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def served_base() -> AsyncIterator[str]:
    # Sessions of earlier tests must not wait out the default 30 s grace and fill the server.
    async with served(
        '[server.limits]\nresume_grace_s = 0.5\nmax_sessions = 8\nadmission = "ceiling"\n'
    ) as base:
        yield base


def healthz(base: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{base}/healthz", timeout=5) as response:
        return json.loads(response.read())


SPINNING = [
    pytest.param(plan(loop_s=1e-300), "loop_s", id="loop_s=1e-300"),
    pytest.param(
        {"name": "x", "loop_s": 1.0, "timeline": [{"at_s": -1e300, "behaviors": [GAZE]}]},
        "timeline[0].at_s",
        id="at_s=-1e300",
    ),
]


@pytest.mark.parametrize(("hostile", "field"), SPINNING)
async def test_a_plan_run_that_would_spin_the_clock_forever_is_refused_and_the_server_answers(
    served_base: str, hostile: dict[str, Any], field: str
) -> None:
    async with SessionClient(session_url(served_base)) as client:
        await client.start(seed=1)
        await client.send({"type": "plan.run", "plan": hostile, "ref": "p"})
        answer = await answer_to(client, "p")
        assert (answer["type"], answer.get("code"), answer.get("fatal")) == ("error", "bad_field", False)
        assert answer["message"].startswith(f"plan: {field}: ")
        await carries_on(client)
        assert (await asyncio.to_thread(healthz, served_base))["status"] == "ok"


@pytest.mark.parametrize(("hostile", "field"), SPINNING)
async def test_a_session_start_with_such_a_plan_is_refused_and_a_good_start_follows(
    served_base: str, hostile: dict[str, Any], field: str
) -> None:
    async with SessionClient(session_url(served_base)) as client:
        await client.send({"type": "session.start", "plan": hostile, "ref": "s"})
        answer = await client.wait_for(lambda m: m.get("ref") == "s", 30)
        assert (answer["type"], answer.get("code"), answer.get("fatal")) == ("error", "bad_field", False)
        assert answer["message"].startswith(f"{field}: ")
        await client.start(seed=2)
        await carries_on(client)
        assert (await asyncio.to_thread(healthz, served_base))["status"] == "ok"


# ------------------------------------------------------------------- values that ended the session inside


@pytest.mark.parametrize(
    ("hostile", "field"),
    [
        pytest.param(plan(idle={"every_s": [1e308, 1e308]}), "idle.every_s[0]", id="idle.every_s=1e308"),
        pytest.param(
            plan(idle={"gaze_every_s": [-1e308, -1e308]}),
            "idle.gaze_every_s[0]",
            id="idle.gaze_every_s=-1e308",
        ),
        pytest.param(plan(idle={"hold_s": [0.5, 1e308]}), "idle.hold_s[1]", id="idle.hold_s=1e308"),
        pytest.param(
            {"name": "x", "timeline": [{"at_s": 0, "behaviors": [{**GAZE, "start": {"offset_s": 1e308}}]}]},
            "timeline[0].behaviors[0].start.offset_s",
            id="start.offset_s=1e308",
        ),
        pytest.param(
            {
                "name": "x",
                "timeline": [
                    {"at_s": 0, "behaviors": [{"kind": "action", "name": "nod", "stroke_s": 1e308}]}
                ],
            },
            "timeline[0].behaviors[0].stroke_s",
            id="stroke_s=1e308",
        ),
    ],
)
async def test_a_number_out_of_bounds_is_a_bad_field_and_the_session_carries_on(
    url: str, hostile: dict[str, Any], field: str
) -> None:
    async with SessionClient(url) as client:
        await client.start(seed=3)
        await client.wait_frame(lambda f: f.header["chunk"] >= 1, timeout=30)
        await client.send({"type": "plan.run", "plan": hostile, "ref": "p"})
        answer = await answer_to(client, "p")
        assert (answer["type"], answer.get("code"), answer.get("fatal")) == ("error", "bad_field", False)
        assert answer["message"].startswith(f"plan: {field}: ")
        await carries_on(client)
        assert not [e for e in client.received.of_type("error") if e["fatal"]]


# ----------------------------------------------------------------------------------------------- nesting


async def test_a_plan_nested_too_deep_is_bad_json_and_the_session_carries_on(url: str) -> None:
    async with SessionClient(url) as client:
        await client.start(seed=4)
        deep = {"type": "plan.run", "plan": plan(description="NESTED"), "ref": "deep"}
        await send_text(client, with_nested(deep, 490))
        error = await client.wait_type("error", timeout=10)
        assert (error["code"], error["fatal"]) == ("bad_json", False)
        assert f"at most {MAX_JSON_DEPTH} levels" in error["message"]
        await carries_on(client)


async def test_an_unknown_field_nested_too_deep_before_the_start_is_bad_json(url: str) -> None:
    async with SessionClient(url) as client:
        await send_text(client, with_nested({"type": "session.start", "junk": "NESTED"}, 990))
        error = await client.wait_type("error", timeout=10)
        assert (error["code"], error["fatal"]) == ("bad_json", False)
        await client.start(seed=5)
        await carries_on(client)


async def test_nesting_up_to_the_bound_is_decoded_as_usual(url: str) -> None:
    async with SessionClient(url) as client:
        await client.start(seed=6)
        # The message object is one level, so the field's value may nest one level less.
        await send_text(
            client, with_nested({"type": "ping", "ref": "ok", "junk": "NESTED"}, MAX_JSON_DEPTH - 1)
        )
        await client.wait_type("pong", ref="ok", timeout=10)
        await send_text(
            client, with_nested({"type": "ping", "ref": "deep", "junk": "NESTED"}, MAX_JSON_DEPTH)
        )
        error = await client.wait_type("error", timeout=10)
        assert (error["code"], error["fatal"]) == ("bad_json", False)
        assert not [m for m in client.received.of_type("pong") if m.get("ref") == "deep"]


# ------------------------------------------------------------------------------- no server inside shown


@pytest.mark.parametrize("name", ["a" * 300, "../plans/greeter"])
async def test_a_bad_plan_name_is_answered_without_the_servers_paths(url: str, name: str) -> None:
    async with SessionClient(url) as client:
        await client.send({"type": "session.start", "plan": name, "ref": "s"})
        refused = await client.wait_for(lambda m: m.get("ref") == "s", 30)
        await client.start(seed=7)
        await client.send({"type": "plan.run", "plan": name, "ref": "p"})
        answer = await answer_to(client, "p")
    for error in (refused, answer):
        assert (error["type"], error["code"], error["fatal"]) == ("error", "bad_field", False)
        assert "a plan name is" in error["message"]
        assert str(PLANS_DIR.parent.parent) not in error["message"]
        assert "Errno" not in error["message"] and ".toml" not in error["message"]


# -------------------------------------------------------------------------------------- what a plan costs


async def test_a_plan_of_960_behaviors_is_refused_and_the_largest_accepted_one_stays_bounded(
    server: OnstageServer, url: str
) -> None:
    async with SessionClient(url) as client:
        started = await client.start(seed=8)
        await client.send({"type": "plan.run", "plan": largest_plan(960), "ref": "huge"})
        answer = await answer_to(client, "huge")
        assert (answer["type"], answer.get("code"), answer.get("fatal")) == ("error", "bad_field", False)
        assert f"at most {MAX_SCRIPT_BEHAVIORS} behaviors" in answer["message"]

        await client.send({"type": "plan.run", "plan": largest_plan(), "ref": "big"})
        assert (await answer_to(client, "big"))["type"] == "input.accepted"
        realizer = server.sessions[started["session_id"]].conductor.minds.realizer
        # Four loops: without a bound, every loop would add four more 64-behavior blocks of ten minutes.
        first = client.received.video[-1].header["chunk"] if client.received.video else 0
        await client.wait_frame(lambda f: f.header["chunk"] >= first + 4 * 6, timeout=60)
        script = [e.block for e in realizer._entries if e.block.source == "script"]
        assert 0 < len(script) <= MAX_LIVE_BLOCKS
        assert sum(len(b.behaviors) for b in script) <= MAX_LIVE_BEHAVIORS
        await carries_on(client)
