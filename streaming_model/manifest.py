"""The capability manifest: what the streaming model can be asked to do.

The rest of the system (reflex policy, Director tools, UI) reads this instead of hard-coding action names,
so that a retrained model with other capabilities changes one place.
"""

from __future__ import annotations

import msgspec

FPS = 24
FRAMES_PER_CHUNK = 4
FRAME_SIZE = 128


class ParamSpec(msgspec.Struct, frozen=True):
    """One parameter of an action: a bounded number or a choice."""

    name: str
    kind: str  # "float" or "choice"
    description: str
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()
    default: float | str | None = None


class SceneSpec(msgspec.Struct, frozen=True):
    """One part of the scene: its choices, the first being the default (today's world)."""

    name: str
    description: str
    choices: tuple[str, ...]

    @property
    def default(self) -> str:
        """The choice a condition that does not name this part holds."""
        return self.choices[0]


class ActionSpec(msgspec.Struct, frozen=True):
    """One action the character can perform, held for as long as the condition names it."""

    name: str
    description: str
    params: tuple[ParamSpec, ...] = ()
    cyclic: bool = False  # True when holding the action repeats a motion (walk, wave, nod)
    sets: tuple[tuple[str, str], ...] = ()
    """Scene parts the action leaves changed (part, choice): a caller asking for it sets them with it."""


class Manifest(msgspec.Struct, frozen=True):
    """Everything a caller may put in a chunk condition, plus the clock and picture the model runs on.

    Everything outside the model's own package reads the clock and the picture size from here."""

    version: int
    fps: int
    frames_per_chunk: int
    width: int
    height: int
    actions: tuple[ActionSpec, ...]
    emotions: tuple[str, ...]
    gaze: str
    speaking: str
    audio_envelope: str
    scene_events: tuple[str, ...]
    identities: int
    scene: tuple[SceneSpec, ...] = ()
    """The scene the model draws and keeps until changed (light, weather, a door, a prop); empty where it
    draws none. A condition names a choice per entry; an entry it leaves out is at its default."""

    @property
    def frame_s(self) -> float:
        """Seconds one frame is shown."""
        return 1.0 / self.fps

    @property
    def chunk_s(self) -> float:
        """Seconds one chunk covers."""
        return self.frames_per_chunk / self.fps


SIDES: tuple[str, ...] = ("other", "left", "right")

_TARGET = (
    ParamSpec("target_x", "float", "Horizontal target, -1 = left edge, +1 = right edge.", -1.0, 1.0, (), 0.0),
    ParamSpec("target_y", "float", "Vertical target, -1 = top, +1 = bottom.", -1.0, 1.0, (), 0.0),
)

ACTIONS: tuple[ActionSpec, ...] = (
    ActionSpec("idle", "Stand still, relaxed; returns paws and head to rest."),
    ActionSpec("walk_left", "Walk toward the left edge, facing left.", cyclic=True),
    ActionSpec("walk_right", "Walk toward the right edge, facing right.", cyclic=True),
    ActionSpec(
        "turn",
        "Turn to face a side of the screen, or around to face the other way.",
        (
            ParamSpec(
                "side",
                "choice",
                "Side to face after turning; 'other' turns around from the current facing.",
                None,
                None,
                SIDES,
                "other",
            ),
        ),
    ),
    ActionSpec("jump", "Jump on the spot (repeats while held).", cyclic=True),
    ActionSpec("sit", "Sit down and stay seated while held."),
    ActionSpec(
        "wave",
        "Raise one paw and wave it.",
        (
            ParamSpec(
                "paw", "choice", "Screen side of the waving paw.", None, None, ("left", "right"), "right"
            ),
        ),
        cyclic=True,
    ),
    ActionSpec("nod", "Nod the head (yes).", cyclic=True),
    ActionSpec("shake_head", "Shake the head (no).", cyclic=True),
    ActionSpec("startle", "Flinch: a small hop with both paws up and wide eyes."),
    ActionSpec("look_at", "Turn head and eyes toward a point on screen.", _TARGET),
)
ACTION_NAMES: tuple[str, ...] = tuple(a.name for a in ACTIONS)
"""The shipped model's actions (what its weights were trained on)."""

SCENE_ACTIONS: tuple[ActionSpec, ...] = (
    ActionSpec("go_to_door", "Walk to the door at the right side of the scene and face it."),
    ActionSpec("open_door", "Walk to the door and open it; it stays open.", sets=(("door", "open"),)),
    ActionSpec("close_door", "Walk to the door and close it; it stays closed.", sets=(("door", "closed"),)),
    ActionSpec(
        "pick_up",
        "Walk to the ball and pick it up; it stays in the paw until put down or thrown.",
        sets=(("prop", "ball"),),
    ),
    ActionSpec("put_down", "Put the ball held down at the feet.", sets=(("prop", "ball"),)),
    ActionSpec(
        "throw",
        "Throw the ball held toward the side faced; it stays where it lands.",
        sets=(("prop", "ball"),),
    ),
)
"""Actions toward the scene: only a backend whose manifest has a scene offers them."""

WORLD_ACTIONS: tuple[ActionSpec, ...] = ACTIONS + SCENE_ACTIONS
"""Every action the world knows: the shipped model's first, at the indices it was trained on."""
WORLD_ACTION_NAMES: tuple[str, ...] = tuple(a.name for a in WORLD_ACTIONS)

ACTION_INDEX: dict[str, int] = {name: i for i, name in enumerate(WORLD_ACTION_NAMES)}
"""Index of every action the world knows."""

EMOTIONS: tuple[str, ...] = ("neutral", "happy", "sad", "surprised", "angry")
EMOTION_INDEX: dict[str, int] = {name: i for i, name in enumerate(EMOTIONS)}

SCENE_EVENTS: tuple[str, ...] = ("floor", "shadow")

SCENE: tuple[SceneSpec, ...] = (
    SceneSpec(
        "light", "Daylight, dusk or night; changes fade over about a second.", ("day", "dusk", "night")
    ),
    SceneSpec(
        "lamp",
        "A street lamp at the left edge: none, off, or on (it lights up a night).",
        ("none", "off", "on"),
    ),
    SceneSpec(
        "weather",
        "Clear, rain or snow; it sets in and clears over a couple of seconds.",
        ("clear", "rain", "snow"),
    ),
    SceneSpec(
        "door",
        "A door at the right side: none, closed or open; it swings over a few frames.",
        ("none", "closed", "open"),
    ),
    SceneSpec("prop", "A ball on the floor the character can pick up, put down and throw.", ("none", "ball")),
)
"""The scene the procedural world draws; each part's first choice is today's world."""
NUM_IDENTITIES = 6


def build_manifest(
    *,
    fps: int = FPS,
    frames_per_chunk: int = FRAMES_PER_CHUNK,
    width: int = FRAME_SIZE,
    height: int = FRAME_SIZE,
    scene: bool = False,
) -> Manifest:
    """The manifest of the shipped model; with other arguments, its vocabulary at another clock and
    picture (what a backend that draws the same world another way declares). ``scene``: the world's
    scene and the actions toward it, which the shipped weights were not trained on."""
    return Manifest(
        version=3,
        fps=fps,
        frames_per_chunk=frames_per_chunk,
        width=width,
        height=height,
        actions=WORLD_ACTIONS if scene else ACTIONS,
        emotions=EMOTIONS,
        gaze="Eyes look at gaze (x, y) in [-1, 1]^2 for every action; look_at also turns the head.",
        speaking="speaking=True opens the mouth by the audio envelope; False keeps it closed (listening).",
        audio_envelope=f"{frames_per_chunk} values in [0, 1] per chunk, one per frame: the voice's loudness.",
        scene_events=SCENE_EVENTS,
        identities=NUM_IDENTITIES,
        scene=SCENE if scene else (),
    )


def manifest_json() -> bytes:
    """The manifest as JSON bytes (what a client or tool-schema generator reads)."""
    return msgspec.json.encode(build_manifest())
