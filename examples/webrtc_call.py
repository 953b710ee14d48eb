"""A call over WebRTC from Python (aiortc): video and voice tracks in, a wave on the data channel out.

    .venv/bin/onstage serve --ice-address 127.0.0.1 &      # a server whose ICE offers loopback
    .venv/bin/python examples/webrtc_call.py                # http://127.0.0.1:8765 by default
    .venv/bin/python examples/webrtc_call.py --base http://127.0.0.1:9000 --seconds 5

It signals through ``GET /v1/rtc``, starts a session on the data channel, waves after a second, and says
when the first frame reflecting the wave arrived on the video track, how many frames came and how loud
the character's voice was.
"""

from __future__ import annotations

import argparse
import asyncio

import numpy as np

from server.webrtc.client import RtcSessionClient
from server.webrtc.ice import offer_only


async def call(base: str, seconds: float) -> None:
    async with RtcSessionClient(base) as client:
        started = await client.start()
        print(f"live: {started['width']}x{started['height']} at {started['fps']} fps")
        await client.wait_frame(lambda f: f.header["chunk"] >= 2, timeout=30)
        sent = await client.send({"type": "input.gesture", "gesture": "wave", "ref": "hi"})
        accepted = await client.wait_type("input.accepted", ref="hi")
        frame = await client.wait_frame(lambda f: accepted["event_id"] in f.header["reflects"], timeout=10)
        print(
            f"the wave shows in chunk {frame.header['chunk']}, {1000 * (frame.t - sent):.0f} ms after it was sent"
        )
        await asyncio.sleep(seconds)
        voice = [s for _, s in client.received.voice]
        loudest = max((float(np.sqrt(np.mean(s**2))) for s in voice), default=0.0)
        print(f"{len(client.received.video)} frames, {len(voice)} voice frames (loudest RMS {loudest:.3f})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--base", default="http://127.0.0.1:8765", help="the server's address")
    parser.add_argument("--seconds", type=float, default=3.0, help="how long to stay after the wave")
    parser.add_argument(
        "--ice-address",
        action="append",
        help="offer ICE candidates here only (default 127.0.0.1; repeatable)",
    )
    args = parser.parse_args()
    offer_only(tuple(args.ice_address or ["127.0.0.1"]))
    asyncio.run(call(args.base, args.seconds))
