"""Every accepted input gets an outcome the client can see: a frame that reflects it, or ``input.outcome``."""

from __future__ import annotations

import asyncio

import pytest

from server.client import SessionClient

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def outcome_of(client: SessionClient, event_id: str, timeout: float = 15.0) -> str:
    """``reflected`` once a frame's ``reflects`` names ``event_id``, else the reason ``input.outcome`` gave."""
    frame = asyncio.ensure_future(
        client.wait_frame(lambda f: event_id in f.header.get("reflects", ()), timeout)
    )
    told = asyncio.ensure_future(client.wait_type("input.outcome", timeout, event_id=event_id))
    done, pending = await asyncio.wait({frame, told}, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    if frame in done:
        return "reflected"
    return str(told.result()["reason"])


async def accepted(client: SessionClient, message: dict[str, object], ref: str) -> str:
    await client.send({**message, "ref": ref})
    answer = await client.wait_for(lambda m: m.get("ref") == ref)
    assert answer["type"] == "input.accepted", answer
    return str(answer["event_id"])


async def test_a_second_wave_within_the_reflex_cooldown_is_told_it_will_not_show(url: str) -> None:
    async with SessionClient(url) as client:
        await client.start(seed=1, director="none")
        await client.wait_frame(lambda f: True, timeout=30)
        first = await accepted(client, {"type": "input.gesture", "gesture": "wave"}, "w1")
        assert await outcome_of(client, first) == "reflected"
        second = await accepted(client, {"type": "input.gesture", "gesture": "wave"}, "w2")
        assert await outcome_of(client, second) == "cooldown"
        told = await client.wait_type("input.outcome", event_id=second)
        assert told["shown"] is False and "cooling down" in told["detail"]
        assert client.received.first_reflecting(second) is None


async def test_every_gesture_and_an_interrupt_get_exactly_one_kind_of_outcome(url: str) -> None:
    async with SessionClient(url) as client:
        await client.start(seed=2, director="none")
        await client.wait_frame(lambda f: True, timeout=30)
        ids = []
        for n, gesture in enumerate(["wave", "thumbs_up", "raise_hand", "nod", "shake_head", "point"]):
            message = {"type": "input.gesture", "gesture": gesture, "x": 0.2, "y": 0.5}
            ids.append(await accepted(client, message, f"g{n}"))
        ids.append(await accepted(client, {"type": "response.interrupt"}, "stop"))
        outcomes = [await outcome_of(client, event_id) for event_id in ids]
        assert outcomes[-1] == "reflected"  # the interrupt's effect shows in the next chunk
        assert set(outcomes) <= {
            "reflected",
            "no_reaction",
            "outranked",
            "cooldown",
            "interrupt",
            "interrupted",
            "replaced",
        }, outcomes
        await asyncio.sleep(1.0)  # a frame that came after an outcome would break the rule
        for event_id, outcome in zip(ids, outcomes, strict=True):
            reflected = client.received.first_reflecting(event_id) is not None
            told = [m for m in client.received.of_type("input.outcome") if m["event_id"] == event_id]
            assert reflected == (outcome == "reflected") and len(told) == (0 if reflected else 1)
