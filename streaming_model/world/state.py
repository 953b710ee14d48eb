"""World state and its deterministic per-frame update.

The next state is a function of (state, frame condition) only, so given the frames so far and the
condition, the next chunk is (nearly) determined: that keeps the model's conditional distribution sharp.
All arrays are batched over N independent worlds.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import numpy as np

from ..manifest import ACTION_INDEX, FPS
from .easing import approach
from .scene import BALL_HOME, DOOR_STAND_X, scene_step

X_MIN, X_MAX, X_HOME = 22.0, 106.0, 64.0
WALK_SPEED = 1.5  # pixels per frame
JUMP_PERIOD = 18  # frames; airborne for the first JUMP_AIR of them
JUMP_AIR = 14
JUMP_HEIGHT = 16.0
NOD_HZ = 2.5
WAVE_HZ = 2.0

A = ACTION_INDEX


@dataclass
class WorldState:
    """Per-world continuous state; every field is float32 of shape (N,) except emo (N, 5)."""

    identity: np.ndarray  # int64 palette index
    x: np.ndarray
    facing: np.ndarray  # -1 left profile, 0 front, +1 right profile
    turn_target: np.ndarray
    sit: np.ndarray  # 0 standing .. 1 seated
    paw_l: np.ndarray  # raise amount of the screen-left paw
    paw_r: np.ndarray
    wave: np.ndarray  # waving oscillation, -1..1
    jump_y: np.ndarray  # height above the floor, pixels
    nod: np.ndarray  # head vertical offset, pixels
    shake: np.ndarray  # head horizontal offset, pixels
    head_dx: np.ndarray  # look_at head offset
    head_dy: np.ndarray
    gaze_x: np.ndarray
    gaze_y: np.ndarray
    eye_wide: np.ndarray
    mouth: np.ndarray  # 0 closed .. 1 fully open
    emo: np.ndarray  # emotion blend weights
    # The scene (world/scene.py): light (N, 3) per channel, the rest (N,); all zero in today's world.
    light: np.ndarray
    tick: np.ndarray  # frames stepped: where the rain and snow have fallen to
    lamp_show: np.ndarray
    lamp_on: np.ndarray
    rain: np.ndarray
    snow: np.ndarray
    door_show: np.ndarray
    door_open: np.ndarray
    ball_show: np.ndarray
    ball_x: np.ndarray
    ball_y: np.ndarray  # height above the floor
    ball_vx: np.ndarray
    ball_vy: np.ndarray
    held: np.ndarray  # 0 on the floor .. 1 in the paw
    reach: np.ndarray  # the door-side paw's raise while opening or closing the door
    crouch: np.ndarray  # bending down to the ball
    throwing: np.ndarray  # 1 while the throwing paw is up

    def copy(self) -> WorldState:
        """A deep copy (states are mutated in place by step)."""
        return replace(self, **{f.name: getattr(self, f.name).copy() for f in fields(self)})


_NAMES = [f.name for f in fields(WorldState)]
SCENE_FIELDS = frozenset(_NAMES[_NAMES.index("light") :])
"""The state's scene fields (from ``light`` on): a snapshot from before the scene holds none of them."""


def initial_state(identity: np.ndarray) -> WorldState:
    """The reference pose: standing at the centre, facing front, neutral, mouth closed."""
    n = len(identity)
    z = np.zeros(n, np.float32)
    emo = np.zeros((n, 5), np.float32)
    emo[:, 0] = 1.0
    special = ("identity", "x", "emo", "light", "ball_x")
    return WorldState(
        identity=np.asarray(identity, np.int64),
        x=z + X_HOME,
        **{f.name: z.copy() for f in fields(WorldState) if f.name not in special},
        emo=emo,
        light=np.ones((n, 3), np.float32),
        ball_x=z + BALL_HOME,
    )


def step(
    s: WorldState,
    action: np.ndarray,
    phase: np.ndarray,
    target: np.ndarray,
    gaze: np.ndarray,
    side: np.ndarray,
    emotion: np.ndarray,
    speaking: np.ndarray,
    audio: np.ndarray,
    scene: np.ndarray | None = None,
) -> None:
    """Advance every world one frame in place. phase: frames since the current action started. scene:
    (N, len(SCENE)) choice indices (None: today's world, every part at its default)."""
    t = phase.astype(np.float32) / FPS
    is_ = {name: action == idx for name, idx in A.items()}
    walking, walk_face, at_door = _walk(s, is_, action, phase, scene)
    _turn(s, is_, phase, target, side, walking, walk_face, at_door)
    s.sit[:] = approach(s.sit, np.where(is_["sit"], 1.0, 0.0), np.where(is_["sit"], 0.12, 0.2))
    _paws(s, is_, phase, side, t)
    _jump(s, is_, phase)
    _head(s, is_, target, gaze, t)
    _face(s, is_, phase, emotion, speaking, audio)


def _walk(
    s: WorldState, is_: dict[str, np.ndarray], action: np.ndarray, phase: np.ndarray, scene: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Position (the scene's actions walk to the door or the ball, and the scene steps here); returns
    whether each world walks, the facing its walk asks for, and whether it stands at the door."""
    dx = np.where(is_["walk_right"], WALK_SPEED, 0.0) - np.where(is_["walk_left"], WALK_SPEED, 0.0)
    scene_step(s, action, phase, np.zeros((len(action), 5), np.int64) if scene is None else scene, dx)
    s.x[:] = np.clip(s.x + dx, X_MIN, X_MAX)
    walking = is_["walk_left"] | is_["walk_right"] | (np.abs(dx) > 0.1)
    walk_face = np.where(dx > 0, 1.0, -1.0)
    at_door = (is_["go_to_door"] | is_["open_door"] | is_["close_door"]) & (np.abs(s.x - DOOR_STAND_X) < 1.0)
    return walking, walk_face, at_door


def _turn(
    s: WorldState,
    is_: dict[str, np.ndarray],
    phase: np.ndarray,
    target: np.ndarray,
    side: np.ndarray,
    walking: np.ndarray,
    walk_face: np.ndarray,
    at_door: np.ndarray,
) -> None:
    """Facing: toward the walk, the turn's goal, the look_at target, or the door when standing at it."""
    # Turning picks its goal at the action's first frame: the side asked for, or (side 0) the side
    # opposite to the current facing.
    starting_turn = is_["turn"] & (phase == 0)
    around = np.where(np.abs(s.facing) < 0.3, 1.0, -np.sign(s.facing))
    goal = np.where(side != 0, np.sign(side), around)
    s.turn_target[:] = np.where(starting_turn, goal, s.turn_target)
    face_goal = np.where(walking, walk_face, s.facing)
    face_goal = np.where(is_["turn"], s.turn_target, face_goal)
    face_goal = np.where(is_["look_at"], 0.6 * target[:, 0], face_goal)
    face_goal = np.where(at_door & ~walking, 1.0, face_goal)
    face_rate = np.where(walking, 0.25, np.where(is_["turn"], 0.15, 0.12))
    s.facing[:] = approach(s.facing, face_goal, face_rate)


def _paws(
    s: WorldState, is_: dict[str, np.ndarray], phase: np.ndarray, side: np.ndarray, t: np.ndarray
) -> None:
    """Paws: waving raises one, startle both; everything else lowers them."""
    startle_env = np.where(phase < 12, 1.0, np.exp(-(phase - 12) / 12.0)).astype(np.float32)
    left_goal = np.where(is_["wave"] & (side < 0), 1.0, 0.0) + np.where(
        is_["startle"], 0.9 * startle_env, 0.0
    )
    right_goal = np.where(is_["wave"] & (side > 0), 1.0, 0.0) + np.where(
        is_["startle"], 0.9 * startle_env, 0.0
    )
    # The scene's actions: the door-side (right) paw reaches for the door; a held ball is carried in the
    # paw on the side faced, a little raised, and raised high to throw it.
    right_goal = np.maximum(right_goal, s.reach)
    carry = np.where(s.throwing > 0, 1.0, 0.3 * s.held)
    left_goal = np.where(s.facing < -0.3, np.maximum(left_goal, carry), left_goal)
    right_goal = np.where(s.facing < -0.3, right_goal, np.maximum(right_goal, carry))
    s.paw_l[:] = approach(s.paw_l, left_goal, 0.25)
    s.paw_r[:] = approach(s.paw_r, right_goal, 0.25)
    s.wave[:] = approach(s.wave, np.where(is_["wave"], np.sin(2 * np.pi * WAVE_HZ * t), 0.0), 0.6)


def _jump(s: WorldState, is_: dict[str, np.ndarray], phase: np.ndarray) -> None:
    """Jumps are a function of the phase, so a held jump repeats with a fixed period; startle hops."""
    cyc = phase % JUMP_PERIOD
    jump = np.where(cyc < JUMP_AIR, JUMP_HEIGHT * np.sin(np.pi * cyc / JUMP_AIR), 0.0)
    hop = np.where(phase < 8, 6.0 * np.sin(np.pi * phase / 8.0), 0.0)
    jump_goal = np.where(is_["jump"], jump, np.where(is_["startle"], hop, 0.0))
    s.jump_y[:] = np.where(is_["jump"] | is_["startle"], jump_goal, approach(s.jump_y, 0.0, 0.5))


def _head(
    s: WorldState, is_: dict[str, np.ndarray], target: np.ndarray, gaze: np.ndarray, t: np.ndarray
) -> None:
    """The head's nod, shake and look_at offset, and the eyes' gaze (look_at's target overrides it)."""
    s.nod[:] = approach(s.nod, np.where(is_["nod"], 3.0 * np.sin(2 * np.pi * NOD_HZ * t), 0.0), 0.6)
    s.shake[:] = approach(
        s.shake, np.where(is_["shake_head"], 3.5 * np.sin(2 * np.pi * NOD_HZ * t), 0.0), 0.6
    )

    look = is_["look_at"]
    s.head_dx[:] = approach(s.head_dx, np.where(look, 3.0 * target[:, 0], 0.0), 0.2)
    s.head_dy[:] = approach(s.head_dy, np.where(look, 2.0 * target[:, 1], 0.0), 0.2)
    g = np.where(look[:, None], target, gaze)
    s.gaze_x[:] = approach(s.gaze_x, g[:, 0], 0.4)
    s.gaze_y[:] = approach(s.gaze_y, g[:, 1], 0.4)


def _face(
    s: WorldState,
    is_: dict[str, np.ndarray],
    phase: np.ndarray,
    emotion: np.ndarray,
    speaking: np.ndarray,
    audio: np.ndarray,
) -> None:
    """Wide eyes (startle, surprise), the mouth (the voice's loudness while speaking) and the emotion."""
    wide_goal = np.where(is_["startle"] & (phase < 18), 1.0, 0.0)
    s.eye_wide[:] = approach(s.eye_wide, np.maximum(wide_goal, s.emo[:, 3]), 0.4)
    s.mouth[:] = approach(s.mouth, np.where(speaking > 0, audio, 0.0), 0.7)
    onehot = np.eye(5, dtype=np.float32)[emotion]
    s.emo[:] = approach(s.emo, onehot, 0.25)
