"""What a transport gives the server for one client connection: the seam between ``server.app`` (sessions,
slots, resume) and the ways a client reaches a session (a WebSocket's ``Outbox``, a WebRTC peer's
``server.webrtc.peer.RtcConnection``).

The server sends control messages (``session.started``, answers, errors) through ``put``; a session's
outputs go through the ``sink`` the connection makes from the session's protocol adapter, which is where a
transport puts media its own way (frames on the WebSocket, tracks on a peer connection).
"""

from __future__ import annotations

from typing import Protocol

from server.adapter import ProtocolAdapter
from server.core.outputs import Sink


class Connection(Protocol):
    """One client's connection, as the server uses it."""

    @property
    def dropped(self) -> int:
        """Media frames dropped on this connection because the client did not keep up."""
        ...

    async def put(self, data: bytes | str, droppable: bool) -> None:
        """Queue one protocol frame; never blocks on the client."""
        ...

    def sink(self, adapter: ProtocolAdapter) -> Sink:
        """Where a session's outputs go while it streams to this connection."""
        ...

    def unsent(self) -> list[str]:
        """Once the connection has closed: the inputs whose answering frame it never wrote (the session
        tells the client on its return)."""
        ...

    async def close(self, flush_s: float = 1.0) -> None:
        """Stop sending; control messages already queued get ``flush_s`` to go out."""
        ...

    async def hang_up(self, code: int, reason: str) -> None:
        """End the connection (``code`` and ``reason`` as a WebSocket close gives them)."""
        ...
