"""The outbox drops media only for a client that is really behind: a client that keeps up gets every
frame, however the server's sending comes in bursts, and however little it sent before."""

from __future__ import annotations

import asyncio

from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection, serve

from server.outbox import Outbox

FRAME_BYTES = 2400  # about a video frame of the default model
BURSTS = 12
PER_BURST = 8  # a chunk's video and audio frames, queued at once when the chunk came late


async def test_a_client_that_keeps_up_gets_every_frame_of_late_chunks_sent_in_bursts() -> None:
    outboxes: list[Outbox] = []

    async def handler(ws: ServerConnection) -> None:
        outbox = Outbox(ws)
        outboxes.append(outbox)
        outbox.start()
        for burst in range(BURSTS):
            for i in range(PER_BURST):
                frame = b"\x01" + (burst * PER_BURST + i).to_bytes(2) + bytes(FRAME_BYTES)
                await outbox.put(frame, droppable=True)
            # Far apart: what the server offers is little, which says nothing of what the client takes.
            await asyncio.sleep(0.25)
        await outbox.put("done", droppable=False)
        await ws.wait_closed()

    async with serve(handler, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        async with connect(f"ws://127.0.0.1:{port}") as client:
            received = []
            while (message := await client.recv()) != "done":
                assert isinstance(message, bytes)
                received.append(int.from_bytes(message[1:3]))
    (outbox,) = outboxes
    assert (received, outbox.dropped) == (list(range(BURSTS * PER_BURST)), 0)


async def test_a_closed_connection_tells_which_inputs_answering_frames_it_never_wrote() -> None:
    outboxes: list[Outbox] = []
    closed = asyncio.Event()

    async def handler(ws: ServerConnection) -> None:
        outbox = Outbox(ws)
        outboxes.append(outbox)
        outbox.start()
        await ws.wait_closed()
        # Queued before the outbox learns the connection is gone, then put after it knows.
        await outbox.put(b"\x02" + bytes(FRAME_BYTES), droppable=False, answers=("e1",))
        await outbox.put(b"\x03" + bytes(FRAME_BYTES), droppable=True)
        while not outbox.closed:  # noqa: ASYNC110 (the sender finds out when it writes)
            await asyncio.sleep(0.01)
        await outbox.put(b"\x02" + bytes(FRAME_BYTES), droppable=False, answers=("e2", "e3"))
        closed.set()

    async with serve(handler, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        async with connect(f"ws://127.0.0.1:{port}"):
            pass
        await asyncio.wait_for(closed.wait(), 10)
    (outbox,) = outboxes
    assert outbox.unsent() == ["e1", "e2", "e3"]
