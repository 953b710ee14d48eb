"""/metrics by the ecosystem's conventions (prometheus-client): histograms across sessions, not a series
per session, of reaction time by input kind, of chunk time and of the audio-to-mouth offset; gauges for sessions and capacity; and the
per-session series docs/protocol.md names. The page parses with Prometheus' own text parser."""

from __future__ import annotations

import asyncio
import math
import os

import pytest

from server.app import OnstageServer
from server.client import SessionClient
from tests.support.observe import families, metrics_text, observations

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def test_a_reflected_gesture_and_the_chunks_sent_are_counted_in_histograms(
    server: OnstageServer, url
) -> None:
    before = families(await asyncio.to_thread(metrics_text, server.port))
    async with SessionClient(url) as client:
        started = await client.start(seed=11, director="none")
        await client.wait_frame(lambda f: True, timeout=30)
        await client.send({"type": "input.gesture", "gesture": "wave", "ref": "w"})
        event_id = (await client.wait_type("input.accepted", 10, ref="w"))["event_id"]
        await client.wait_frame(lambda f: event_id in f.header["reflects"], timeout=30)
        after = families(await asyncio.to_thread(metrics_text, server.port))
        session = started["session_id"]

    def count(family: str, sample: str, **labels: str) -> float:
        key = (sample, tuple(sorted(labels.items())))
        return after[family].get(key, 0.0) - (before.get(family, {}).get(key, 0.0))

    assert count("onstage_reaction_seconds", "onstage_reaction_seconds_count", kind="gesture") >= 1
    # One series per input kind, across sessions: no session label on the histograms.
    assert all("session" not in dict(labels) for _, labels in after["onstage_reaction_seconds"])
    assert all("session" not in dict(labels) for _, labels in after["onstage_chunk_seconds"])
    chunks = count("onstage_chunk_seconds", "onstage_chunk_seconds_count")
    sent = after["onstage_session_chunks_sent"][
        ("onstage_session_chunks_sent_total", (("session", session),))
    ]
    assert chunks >= sent >= 1  # every chunk this session sent (and any other's) was observed
    # The default voice start waits for the voice: none of this session's voices started late.
    overdue_voice = ("onstage_session_voice_overdue_total", (("session", session),))
    assert after["onstage_session_voice_overdue"][overdue_voice] == 0
    assert 0 <= count("onstage_chunks_on_time", "onstage_chunks_on_time_total") <= chunks
    # The loop's lag is measured all along (a timer every 50 ms; the session lasted longer than that).
    assert count("onstage_event_loop_lag_seconds", "onstage_event_loop_lag_seconds_count") >= 1
    # Where the CPU went, by kind of thread: the generators made this session's chunks meanwhile.
    generators = sum(
        count("onstage_thread_cpu_seconds", "onstage_thread_cpu_seconds_total", kind=kind)
        for kind in ("lane", "gen")
    )
    assert generators > 0
    assert (
        count(
            "onstage_thread_runnable_wait_seconds", "onstage_thread_runnable_wait_seconds_total", kind="loop"
        )
        >= 0
    )
    # The buckets are cumulative and end in +Inf at the count.
    buckets = sorted(
        (float(dict(labels)["le"]), value)
        for (name, labels), value in after["onstage_chunk_seconds"].items()
        if name.endswith("_bucket")
    )
    assert [v for _, v in buckets] == sorted(v for _, v in buckets)
    assert buckets[-1] == (float("inf"), after["onstage_chunk_seconds"][("onstage_chunk_seconds_count", ())])
    # What the generators keep real-time: this session and more, within the ceiling.
    capacity = after["onstage_capacity_sessions"][("onstage_capacity_sessions", ())]
    assert 1 <= capacity <= server.limits.max_sessions
    assert 0.0 <= after["onstage_generator_busy"][("onstage_generator_busy", ())] <= 1.0
    # The machine's load, measured though this server does not weigh it; one more session adds to it.
    machine = after["onstage_machine_busy"][("onstage_machine_busy", ())]
    machine_next = after["onstage_machine_busy_next"][("onstage_machine_busy_next", ())]
    assert 0.0 < machine < machine_next
    # ... by at least what a session costs this server (the running ones may be priced higher than now)
    session_cores = after["onstage_session_cores"][("onstage_session_cores", ())]
    assert session_cores > 0.0 and machine_next >= machine + session_cores / (os.cpu_count() or 1) - 1e-9
    assert after["onstage_sessions_live"][("onstage_sessions_live", ())] >= 1


TALK = "I will tell you about the forest, the river and the old stone bridge."


async def test_the_character_s_voice_and_mouth_sent_in_step_are_counted_at_no_offset(
    server: OnstageServer, url
) -> None:
    before = families(await asyncio.to_thread(metrics_text, server.port))
    plan = {"name": "talk", "timeline": [{"at_s": 0.3, "behaviors": [{"kind": "speech", "text": TALK}]}]}
    async with SessionClient(url) as client:
        started = await client.start(seed=11, director="script", plan=plan)
        await client.wait_type("character.speech", timeout=60, state="ended")
        # The last window closes up to two seconds after the speech (trailing silence fills it).
        window = math.ceil(2 * started["fps"] / started["chunk_frames"]) + 1
        last = client.received.video[-1].header["chunk"]
        await client.wait_frame(lambda f: f.header["chunk"] >= last + window, timeout=30)
        after = families(await asyncio.to_thread(metrics_text, server.port))

    added = observations(before, after, "onstage_audio_mouth_offset_seconds")
    # Four seconds of speech: at least one two-second window lined up, every one of them at lag 0.
    assert added["count"] >= 1
    assert added["0.02"] == added["count"] and added["-0.02"] == 0
    assert "sum" not in added  # prometheus-client leaves it out of a histogram with negative buckets
    assert all("session" not in dict(labels) for _, labels in after["onstage_audio_mouth_offset_seconds"])
