"""The user's camera, as landmarks: gestures recognised from what the client's camera shows.

The browser page runs the hand and face models itself (server/page/camera.js) and sends, a dozen times a
second at most, only the landmarks of what it sees (``input.landmarks``): never a picture. Here each
session's frames go through the hand classifier (wave, thumbs up, point, raise hand) and the head
classifier (nod, shake head), in the client's own time (``t_ms``), and every gesture that starts becomes a
``Gesture`` event on the session's bus, where the same reflexes answer it as answer the page's gesture
buttons. The client is told of each one (``input.gesture``); a frame is otherwise not answered, as audio
is not: errors only.
"""

from __future__ import annotations

from events.errors import BadInput
from events.gestures import LandmarkGestureClassifier, check_time
from events.head_gestures import HeadGestureClassifier
from events.stamp import Stamper
from events.vocabulary import Gesture
from server import protocol as p
from server.core.conductor import Conductor


class CameraGestures:
    """One session's camera: the hand and head classifiers, fed the same frames."""

    def __init__(self, stamper: Stamper) -> None:
        self.hands = LandmarkGestureClassifier(stamper)
        self.head = HeadGestureClassifier(stamper)
        self._last_t: float | None = None

    def feed(self, msg: p.InputLandmarks) -> list[Gesture]:
        """The gestures that start with this frame (``BadInput`` for a frame that goes back in time)."""
        # Checked before either classifier takes the frame, so that a refused frame changes neither.
        self._last_t = check_time(msg.t_ms, self._last_t)
        return self.hands.feed(msg.hand, msg.t_ms) + self.head.feed(msg.face, msg.t_ms)


async def handle(camera: CameraGestures, core: Conductor, msg: p.InputLandmarks) -> list[p.ServerMessage]:
    """One ``input.landmarks`` frame: its gestures published on the bus, and told to the client."""
    try:
        gestures = camera.feed(msg)
    except BadInput as exc:
        raise p.ProtocolError(p.ErrorCode.BAD_FIELD, str(exc), msg.ref) from None
    told: list[p.ServerMessage] = []
    for gesture in gestures:
        await core.publish(gesture)
        told.append(
            p.InputGestureSeen(
                event_id=gesture.id,
                gesture=gesture.gesture,
                confidence=gesture.confidence,
                x=gesture.x,
                y=gesture.y,
                t_ms=msg.t_ms,
                ref=msg.ref,
            )
        )
    return told
