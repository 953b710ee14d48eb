"""The outbox drops media only for a client that is really behind: a client that keeps up gets every
frame, however the server's sending comes in bursts, and however little it sent before."""

from __future__ import annotations

import asyncio

from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection, serve

from server.backlog import Backlog
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


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_rate_is_what_the_client_took_while_it_was_behind() -> None:
    clock, pending = Clock(), [0]
    backlog = Backlog(lambda: pending[0], clock, window_s=1.0, forget_s=3.0)
    assert backlog.measure() == (0, None)  # never behind: no rate to tell
    for _ in range(10):  # 10 000 bytes on the wire every 0.1 s; the client takes 5 000 of them
        backlog.wrote(bytes(9996))
        clock.now += 0.1
        pending[0] += 5000
        measured = backlog.measure()
    assert measured[0] == 50_000
    assert measured[1] is not None and abs(measured[1] - 50_000) < 1


def test_time_the_client_kept_up_does_not_count_and_an_old_rate_is_forgotten() -> None:
    clock, pending = Clock(), [0]
    backlog = Backlog(lambda: pending[0], clock, window_s=1.0, forget_s=3.0)
    backlog.measure()
    backlog.wrote(bytes(9996))
    clock.now += 0.5
    pending[0] = 5000  # behind: took 5 000 bytes in 0.5 s
    assert backlog.measure() == (5000, 10_000)
    backlog.wrote(bytes(996))
    clock.now += 2.0
    pending[0] = 0  # caught up: the 2 s say nothing of its rate
    assert backlog.measure() == (0, 10_000)
    clock.now += 1.5
    assert backlog.measure() == (0, None)  # not behind for longer than forget_s
