"""What a session says while no client is connected (between a dropped connection and its resume), so
the client that comes back learns what it missed: every input still gets its outcome.

Media is not kept (the resumed client sees the call from where it is now), but a frame that answered an
input becomes a notice that the input showed while the client was away (docs/protocol.md, Outcomes);
other notices are kept, oldest dropped beyond a bound, but for the periodic figures, which only the
latest matter of.
"""

from __future__ import annotations

from collections import deque

from server.core.outputs import AudioOut, Figures, Notice, Output, Unshown, VideoOut, answers

HELD_MAX = 256
"""Notices kept for a client that is away; beyond it, the oldest go (a session away that long has said
more than a returning client would read)."""
AWAY_DETAIL = "it showed while no client was connected"


def shown_away(event_id: str) -> Unshown:
    """The outcome of an input whose frame went out to nobody."""
    return Unshown(event_id=event_id, reason="away", detail=AWAY_DETAIL)


class Away:
    """The outputs of a session while no client takes them: ``hold`` them, ``take`` them on resume."""

    def __init__(self) -> None:
        self._held: deque[Notice] = deque(maxlen=HELD_MAX)
        self.media_dropped = 0

    def __bool__(self) -> bool:
        return bool(self._held)

    def hold(self, item: Output) -> None:
        """Keep ``item`` for the client's return (media only as the outcomes it carried)."""
        if isinstance(item, (VideoOut, AudioOut)):
            self.media_dropped += 1
            self.missed(answers(item))
        elif not isinstance(item, Figures):
            self._held.append(item)

    def missed(self, event_ids: tuple[str, ...] | list[str]) -> None:
        """Inputs whose answering frame never reached the client (a connection that dropped with it
        unsent, or no connection at all)."""
        self._held.extend(shown_away(e) for e in event_ids)

    def take(self) -> list[Notice]:
        """Everything held, oldest first; nothing is held after."""
        held = list(self._held)
        self._held.clear()
        return held
