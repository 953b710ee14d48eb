"""Reaction latency and the voice-to-mouth offset over the WebSocket and over WebRTC, in one run, against
one ``onstage serve`` (its own process, the default model, ICE on 127.0.0.1 only).

    .venv/bin/python benchmarks/transports.py              # 6 inputs per kind and transport
    .venv/bin/python benchmarks/transports.py --rounds 12

Reaction, as ``reaction.py`` measures it (the same inputs, sent the same way, timed at the client): from
sending an input to the arrival of the first video frame whose ``reflects`` names its event. Over WebRTC
that frame is the first decoded from the video track whose chunk the data channel's ``video.chunk`` says
reflects it (``server.webrtc.client``); gestures and text go on the data channel, sounds into the
microphone track (Opus at 48 kHz, resampled by the server to 16 kHz).

Voice-to-mouth offset: one session per transport whose plan speaks for about ten seconds. Content: the
voice's per-frame loudness as the server cut it against the mouth openness ``streaming_model.probes``
reads from the frames (``reaction.voice_mouth_offset``): what the session puts together. Over WebRTC also
as the client got them: the voice that arrived while each frame was the newest, against that frame's
mouth, so the transport's own offset between the tracks shows (+ = mouth late).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import uvloop
from reaction import (
    KINDS,
    Trial,
    clock_of,
    delays,
    fire,
    first_chunk,
    last_frame_of,
    latency_table,
    nth,
    sounds,
    voice_mouth_offset,
)
from reaction import Microphone as WsMicrophone
from served import served, session_url

from server.client import Received, SessionClient
from server.webrtc.client import RtcSessionClient
from server.webrtc.ice import offer_only

SERVER_CONFIG = """
[server.limits]
admission = "ceiling"  # admission is not what is measured here
max_sessions = 2
resume_grace_s = 0.2

[server.rtc]
ice_addresses = ["127.0.0.1"]
"""
TALK = " ".join(["I will tell you about the forest, the river and the old stone bridge."] * 3)


@contextlib.asynccontextmanager
async def session(transport: str, base: str, seed: int, **start: Any) -> AsyncIterator[tuple]:
    """A started session over ``transport``: (client, microphone) with ``reaction.fire``'s interface."""
    if transport == "ws":
        async with SessionClient(session_url(base)) as client:
            await client.start(seed=seed, **start)
            async with WsMicrophone(client) as mic:
                yield client, mic
    else:
        async with RtcSessionClient(base) as rtc:
            await rtc.start(seed=seed, **start)
            yield rtc, rtc.mic
    await asyncio.sleep(0.5)  # past the server's resume grace: this session is gone before the next


async def reactions(transport: str, base: str, seed: int, rounds: int, gap: int) -> list[Trial]:
    audio = sounds("real")
    waits = delays(seed, rounds, "random")
    trials: list[Trial] = []
    for kind in KINDS:
        async with session(transport, base, seed) as (client, mic):
            first = first_chunk(clock_of(client))
            mine = [
                await fire(client, mic, kind, first + i * gap, nth(audio, kind, i), w)
                for i, w in enumerate(waits)
            ]
            await last_frame_of(client, mine[-1].after_chunk + gap // 2)
        for trial in mine:
            trial.frame = client.received.first_reflecting(trial.event_id) if trial.event_id else None
        trials += mine
    return trials


async def talking(transport: str, base: str, seed: int) -> tuple[Received, int]:
    """What a session that speaks for a while sent; its frame rate."""
    plan = {"name": "talk", "timeline": [{"at_s": 0.3, "behaviors": [{"kind": "speech", "text": TALK}]}]}
    async with session(transport, base, seed, plan=plan, director="script") as (client, _):
        await client.wait_type("character.speech", timeout=60, state="ended")
    return client.received, clock_of(client).fps


async def main(args: argparse.Namespace) -> None:
    offer_only(("127.0.0.1",))  # this process's ICE too: nothing leaves loopback
    async with served(SERVER_CONFIG) as base:
        results = {t: await reactions(t, base, args.seed, args.rounds, args.gap) for t in ("ws", "rtc")}
        spoken = {t: await talking(t, base, args.seed) for t in ("ws", "rtc")}
    print(f"## Reaction latency at the client by transport (seed {args.seed}, {args.rounds} per kind)\n")
    for transport, trials in results.items():
        print(f"### {'WebSocket' if transport == 'ws' else 'WebRTC'}\n")
        print("\n".join(latency_table(trials)) + "\n")
    print("## Voice-to-mouth offset (+ = mouth late)\n")
    print("| transport | in the content sent | as the client received the tracks |\n|---|---|---|")
    ws_received, fps = spoken["ws"]
    rtc_received, _ = spoken["rtc"]
    print(f"| WebSocket | {voice_mouth_offset(ws_received, 0, fps)} | (the same: one frame carries both) |")
    print(f"| WebRTC | (the same content) | {voice_mouth_offset(rtc_received, 0, fps)} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--rounds", type=int, default=6, help="inputs per kind and transport")
    parser.add_argument("--gap", type=int, default=15, help="chunks between inputs")
    uvloop.run(main(parser.parse_args()))
