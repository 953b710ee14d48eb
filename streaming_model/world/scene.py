"""The scene around the character: light, lamp, weather, a door and a ball, and how they change per frame.

The scene's choices (``manifest.SCENE``) are targets: the world moves toward them over a few frames (a
light fades, rain sets in, a door swings), so a change never cuts. The ball is moved only by the
character's actions toward it (pick up, put down, throw) and by gravity; it stays where it lands.
"""

from __future__ import annotations

import numpy as np

from ..manifest import ACTION_INDEX, SCENE
from . import palette as P
from .easing import approach, fade

PART = {spec.name: i for i, spec in enumerate(SCENE)}
"""Column of each scene part in a scene code array."""

# Where things are, in pixels of the 128x128 world (hard-edged rectangles, so that the probes find them
# exactly). The door stands at the right edge, the lamp at the left; neither is reached by the character's
# head, and the lamp's head sits above anything the character reaches.
DOOR_LEFT, DOOR_RIGHT, DOOR_TOP = 110, 126, 34  # the frame, inclusive columns; the leaf is inside it
LEAF_LEFT, LEAF_RIGHT, LEAF_TOP = 112, 124, 36
LEAF_OPEN_W = 3  # columns of the leaf still seen, edge on, when it is wide open
DOOR_STAND_X = 100.0  # where the character stands to reach the door
LAMP_LEFT, LAMP_RIGHT, LAMP_TOP, LAMP_HEAD_BOTTOM = 0, 8, 8, 15
POST_LEFT, POST_RIGHT = 3, 4
BULB = (12, 15, 1, 7)  # rows, columns (inclusive) of the glowing part of the lamp's head
BALL_R = 5.0
BALL_HOME = 40.0
BALL_MIN, BALL_MAX = 6.0, 104.0  # the ball's centre stays off the door and the lamp
REACH = 6.0  # pixels between the character and the ball to pick it up
GRAVITY = 0.45
THROW_AT = 6  # frames into a throw when the ball leaves the paw
THROW_VX, THROW_VY = 2.0, 4.0  # pixels per frame as it leaves the paw

LIGHT_RATE, SHOW_RATE, WEATHER_RATE, DOOR_RATE, HOLD_RATE = 0.08, 0.2, 0.1, 0.12, 0.25

_WALK_TO_DOOR = ("go_to_door", "open_door", "close_door")


def light_goal(light: np.ndarray, lamp_on: np.ndarray) -> np.ndarray:
    """(N, 3) light the scene fades to: the light's, raised by a lamp that is on."""
    base = P.LIGHT[light]
    return np.where(lamp_on[:, None], np.maximum(base, P.LAMP_LIGHT), base)


def scene_step(s, action: np.ndarray, phase: np.ndarray, scene: np.ndarray, walk: np.ndarray) -> None:
    """Advance the scene of every world one frame in place (``s`` is a ``WorldState``).

    scene: (N, len(SCENE)) choice indices. walk: (N,) pixels the character moves this frame by its own
    actions; set here for the actions that walk to the door or the ball. Also sets what those actions do
    to the body: ``reach`` (the door-side paw), ``crouch`` (to the ball), ``throwing`` (paw up).
    """
    is_ = {name: action == ACTION_INDEX[name] for name in ("pick_up", "put_down", "throw", *_WALK_TO_DOOR)}
    s.tick += 1.0
    lamp_on = scene[:, PART["lamp"]] == 2
    s.light[:] = approach(s.light, light_goal(scene[:, PART["light"]], lamp_on), LIGHT_RATE)
    s.lamp_show[:] = fade(s.lamp_show, scene[:, PART["lamp"]] > 0, SHOW_RATE)
    s.lamp_on[:] = fade(s.lamp_on, lamp_on, 0.3)
    weather = scene[:, PART["weather"]]
    s.rain[:] = fade(s.rain, weather == 1, WEATHER_RATE)
    s.snow[:] = fade(s.snow, weather == 2, WEATHER_RATE)
    s.door_show[:] = fade(s.door_show, scene[:, PART["door"]] > 0, SHOW_RATE)
    s.ball_show[:] = fade(s.ball_show, scene[:, PART["prop"]] > 0, SHOW_RATE)

    # Walking to the door; the door waits for an opening or closing character to arrive.
    to_door = is_["go_to_door"] | is_["open_door"] | is_["close_door"]
    gap = DOOR_STAND_X - s.x
    at_door = np.abs(gap) < 1.0
    walk[:] = np.where(to_door, np.clip(gap, -1.5, 1.5), walk)
    door_goal = (scene[:, PART["door"]] == 2).astype(np.float32)
    door_goal = np.where(is_["open_door"] & at_door, 1.0, door_goal)
    door_goal = np.where(is_["close_door"] & at_door, 0.0, door_goal)
    waiting = (is_["open_door"] | is_["close_door"]) & ~at_door
    moving = np.abs(door_goal - s.door_open) > 0.05
    s.door_open[:] = np.where(waiting, s.door_open, approach(s.door_open, door_goal, DOOR_RATE))
    s.reach[:] = np.where((is_["open_door"] | is_["close_door"]) & at_door & moving & ~waiting, 0.6, 0.0)

    # The ball: walked to and picked up, put down at the feet, or thrown toward the side faced.
    shown = s.ball_show > 0.5
    free = s.held < 0.5
    to_ball = is_["pick_up"] & shown & free
    gap = s.ball_x - s.x
    near = np.abs(gap) < REACH
    walk[:] = np.where(to_ball & ~near, np.clip(gap - np.sign(gap) * (REACH - 1), -1.5, 1.5), walk)
    taking = is_["pick_up"] & shown & (near | ~free)
    putting = is_["put_down"] & (s.held > 0)
    # A move cut short is finished the way it was going (a ball is in the paw or on the floor).
    goal = np.where(taking, 1.0, np.where(putting, 0.0, np.round(s.held)))
    s.held[:] = approach(s.held, goal, HOLD_RATE)
    s.held[:] = np.where(s.held < 0.01, 0.0, np.where(s.held > 0.99, 1.0, s.held))  # a finished move is exact
    s.crouch[:] = np.where((taking & (s.held < 0.9)) | (putting & (s.held > 0.1)), 0.35, 0.0)

    side = np.where(s.facing < -0.3, -1.0, 1.0)
    releasing = is_["throw"] & (phase == THROW_AT) & (s.held > 0.5)
    s.ball_vx[:] = np.where(releasing, THROW_VX * side, s.ball_vx)
    s.ball_vy[:] = np.where(releasing, THROW_VY, s.ball_vy)
    s.ball_y[:] = np.where(releasing, _paw_height(s), s.ball_y)
    s.ball_x[:] = np.where(releasing, np.clip(s.x + 16.0 * side, BALL_MIN, BALL_MAX), s.ball_x)
    s.held[:] = np.where(releasing, 0.0, s.held)
    s.throwing[:] = np.where(is_["throw"] & (phase < THROW_AT) & (s.held > 0.5), 1.0, 0.0)
    # A ball in the paw goes where the character goes; being put down, to the floor before the feet.
    s.ball_x[:] = np.where(s.held == 1.0, np.clip(s.x + 12.0 * side, BALL_MIN, BALL_MAX), s.ball_x)
    s.ball_x[:] = np.where(putting, np.clip(s.x + 10.0 * side, BALL_MIN, BALL_MAX), s.ball_x)
    _fly(s)


def _paw_height(s) -> np.ndarray:
    """About the height above the floor of a ball in a raised paw, where a throw lets it go."""
    return (40.0 + s.jump_y).astype(np.float32)


def _fly(s) -> None:
    """Gravity, bounces and friction for a ball that is not held."""
    air = (s.held == 0) & ((s.ball_y > 0) | (s.ball_vy != 0))
    vy = s.ball_vy - GRAVITY
    y = s.ball_y + vy
    landed = air & (y <= 0)
    bounce = np.where(np.abs(vy) > 1.5, -0.35 * vy, 0.0)
    s.ball_y[:] = np.where(air, np.where(landed, 0.0, y), s.ball_y)
    s.ball_vy[:] = np.where(air, np.where(landed, bounce, vy), s.ball_vy)
    rolling = (s.held == 0) & (s.ball_vx != 0)
    x = s.ball_x + s.ball_vx
    wall = (x < BALL_MIN) | (x > BALL_MAX)
    s.ball_x[:] = np.where(rolling, np.clip(x, BALL_MIN, BALL_MAX), s.ball_x)
    vx = np.where(wall, -0.3 * s.ball_vx, s.ball_vx)
    vx = np.where(s.ball_y == 0, 0.8 * vx, vx)  # on the floor it slows down
    s.ball_vx[:] = np.where(rolling, np.where(np.abs(vx) < 0.1, 0.0, vx), s.ball_vx)
