"""Scripted plans: a timeline of blocks plus triggers on events, the mind used when no LLM is configured.

A script is a TOML file (see docs/plans.md and examples/plans/)::

    name = "hello"
    [places]
    window = { x = -0.85, gaze = [-1.0, -0.4] }
    [[timeline]]
    at_s = 1.0
    behaviors = [{ kind = "speech", text = "Hi!" }]
    [[trigger]]
    on = "gesture"
    gesture = "wave"
    behaviors = [{ kind = "action", name = "wave", duration_s = 2.0 }]

Timeline entries start ``at_s`` seconds after the script starts (repeating every ``loop_s`` when set).
Triggers fire on events from the bus (gesture, sound, speech started, text, end of turn) or on silence
(no input from the user for ``after_s`` seconds, measured on the frame clock). A behavior may name a
``place`` instead of coordinates: a move walks to the place's x, a gaze looks at its gaze point.
The script's ``[idle]`` table sets the idle variety that keeps the character alive between cues.
``agent.script_runner`` runs a script against a realizer.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import msgspec

from agent.bounds import (
    MAX_IDLE_ACTIONS,
    MAX_IDLE_S,
    MAX_PLACES,
    MAX_PLAN_S,
    MAX_SCRIPT_BEHAVIORS,
    MIN_LOOP_S,
    NAME_PATTERN,
)
from agent.idle import IdleConfig
from agent.plan_checks import check_number, validate_block
from agent.plan_io import shape_error
from agent.plans import Behavior, Block, Channel, Composition, PlanError
from events.vocabulary import (
    EndOfTurn,
    Event,
    Gesture,
    SoundClass,
    SpeechStarted,
    TextInput,
    Transcript,
)
from streaming_model.manifest import Manifest

PLANS_DIR = Path(__file__).resolve().parent.parent / "examples" / "plans"
"""Where ``load_script`` looks for a script by name."""


class Place(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A named spot in the scene: where to stand (floor x) and where to look to see it."""

    x: float
    gaze: tuple[float, float] = (0.0, 0.0)


class _Cue(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The block a timeline entry or trigger submits (the ``Block`` fields a script may set)."""

    behaviors: list[Behavior]
    priority: int = 0
    composition: Composition = "merge"
    locks: list[Channel] = []
    expires_s: float | None = None
    label: str = ""

    def block(self, label: str, epoch: int, cause: str | None) -> Block:
        return Block(
            behaviors=self.behaviors,
            source="script",
            priority=self.priority,
            composition=self.composition,
            locks=self.locks,
            expires_s=self.expires_s,
            epoch=epoch,
            cause=cause,
            label=self.label or label,
        )


class TimelineEntry(_Cue, frozen=True, kw_only=True):
    """A block that starts ``at_s`` seconds into the script."""

    at_s: float


class _Trigger(_Cue, frozen=True, kw_only=True, tag_field="on"):
    """A block submitted when an event matches; not again within ``cooldown_s``; only once if ``once``."""

    name: str = ""
    cooldown_s: float = 2.0
    once: bool = False

    def matches(self, event: Event) -> bool:
        """Whether ``event`` fires this trigger (silence triggers fire from the clock instead)."""
        return False


class GestureTrigger(_Trigger, frozen=True, kw_only=True, tag="gesture"):
    """Fires on a user gesture (``wave``, ``point``, ``thumbs_up``...)."""

    gesture: str
    min_confidence: float = 0.5

    def matches(self, event: Event) -> bool:
        return (
            isinstance(event, Gesture)
            and event.gesture == self.gesture
            and event.confidence >= self.min_confidence
        )


class SoundTrigger(_Trigger, frozen=True, kw_only=True, tag="sound"):
    """Fires on a recognised sound class (YAMNet label such as ``Knock``, ``Clapping``)."""

    label: str
    min_score: float = 0.3

    def matches(self, event: Event) -> bool:
        return (
            isinstance(event, SoundClass)
            and event.label.casefold() == self.label.casefold()
            and event.score >= self.min_score
        )


class SpeechTrigger(_Trigger, frozen=True, kw_only=True, tag="speech_started"):
    """Fires when the user starts speaking."""

    def matches(self, event: Event) -> bool:
        return isinstance(event, SpeechStarted)


class TextTrigger(_Trigger, frozen=True, kw_only=True, tag="text"):
    """Fires on typed text, or a final transcript, containing ``contains`` (any text when empty)."""

    contains: str = ""

    def matches(self, event: Event) -> bool:
        if isinstance(event, TextInput) or (isinstance(event, Transcript) and event.final):
            return self.contains.casefold() in event.text.casefold()
        return False


class TurnTrigger(_Trigger, frozen=True, kw_only=True, tag="end_of_turn"):
    """Fires when the user finishes a turn (with ``contains`` in its transcript, when given)."""

    contains: str = ""

    def matches(self, event: Event) -> bool:
        return (
            isinstance(event, EndOfTurn) and self.contains.casefold() in (event.transcript or "").casefold()
        )


class SilenceTrigger(_Trigger, frozen=True, kw_only=True, tag="silence"):
    """Fires once the user has been silent for ``after_s``; rearms when the user does something."""

    after_s: float


Trigger = GestureTrigger | SoundTrigger | SpeechTrigger | TextTrigger | TurnTrigger | SilenceTrigger


class Script(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A scripted plan: timeline, triggers, places and idle variety."""

    name: str
    description: str = ""
    duration_s: float | None = None
    loop_s: float | None = None
    idle: IdleConfig = IdleConfig()
    places: dict[str, Place] = {}
    timeline: list[TimelineEntry] = []
    trigger: list[Trigger] = []


class ScriptError(PlanError):
    """A script that cannot run; ``field`` is the path of the bad field (``trigger[1].behaviors[0].name``)."""


# ----------------------------------------------------------------------------------------- loading


def _with_places(data: Any) -> Any:
    """A copy of ``data`` with ``place = "window"`` in move and gaze behaviors replaced by coordinates."""
    if not isinstance(data, dict):
        return data
    raw = data.get("places", {})
    if not isinstance(raw, dict):
        raise ScriptError("places", f"must be a table of places, got {type(raw).__name__}")
    places: dict[str, Place] = {}
    for name, value in raw.items():
        try:
            places[str(name)] = msgspec.convert(value, Place)
        except msgspec.ValidationError as exc:
            error = shape_error(exc)
            raise ScriptError(f"places.{name}.{error.field}".removesuffix(".$"), error.message) from None
    # Copies only the lists and tables on the way to a behavior it rewrites: the caller's data stays as it
    # was, and no recursion follows whatever nesting the rest of the data has.
    data = dict(data)
    for section in ("timeline", "trigger"):
        cues = data.get(section)
        if not isinstance(cues, list):
            continue
        cues = data[section] = [dict(cue) if isinstance(cue, dict) else cue for cue in cues]
        for i, cue in enumerate(cues):
            behaviors = cue.get("behaviors") if isinstance(cue, dict) else None
            if not isinstance(behaviors, list):
                continue
            behaviors = cue["behaviors"] = list(behaviors)
            for j, b in enumerate(behaviors):
                if not isinstance(b, dict) or "place" not in b:
                    continue
                name = b["place"]
                place = places.get(name) if isinstance(name, str) else None
                if place is None:
                    raise ScriptError(
                        f"{section}[{i}].behaviors[{j}].place",
                        f"unknown place {name!r}; known: {sorted(places)}"
                        if isinstance(name, str)
                        else "a place is named by a string",
                    )
                b = {k: v for k, v in b.items() if k != "place"}
                if b.get("kind") == "move":
                    b["x"] = place.x
                elif b.get("kind") == "gaze":
                    b["x"], b["y"] = place.gaze
                behaviors[j] = b
    return data


def script_from_builtins(data: Any, manifest: Manifest) -> Script:
    """Build and validate a script from parsed TOML or JSON (what ``plan.run`` may carry inline).

    Every number is checked against ``agent.bounds``; anything wrong is a ``ScriptError`` naming the field.
    """
    try:
        script = msgspec.convert(_with_places(data), Script)
        _check_bounds(script, manifest)
        for section, cues in (("timeline", script.timeline), ("trigger", script.trigger)):
            for i, cue in enumerate(cues):
                try:
                    validate_block(cue.block(cue.label, 0, None), manifest)
                except PlanError as exc:
                    raise ScriptError(f"{section}[{i}].{exc.field}", exc.message) from None
    except msgspec.ValidationError as exc:
        error = shape_error(exc)
        raise ScriptError(error.field, error.message) from None
    except ScriptError:
        raise
    except PlanError as exc:
        raise ScriptError(exc.field, exc.message) from None
    return script


def _check_bounds(script: Script, manifest: Manifest) -> None:
    """The script-level bounds (its blocks are checked by ``validate_block``); raises ``PlanError``."""
    behaviors = sum(len(cue.behaviors) for cue in (*script.timeline, *script.trigger))
    if behaviors > MAX_SCRIPT_BEHAVIORS:
        raise PlanError(
            "timeline",
            f"at most {MAX_SCRIPT_BEHAVIORS} behaviors in a plan's timeline and triggers, got {behaviors}",
        )
    if script.duration_s is not None:
        check_number(script.duration_s, "duration_s", 0.0, MAX_PLAN_S)
    if script.loop_s is not None:
        check_number(script.loop_s, "loop_s", MIN_LOOP_S, MAX_PLAN_S)
    for i, entry in enumerate(script.timeline):
        # In a loop, every entry starts inside it: one loop's entries then never outrun the next loop's.
        check_number(entry.at_s, f"timeline[{i}].at_s", 0.0, MAX_PLAN_S)
        if script.loop_s is not None and entry.at_s >= script.loop_s:
            raise PlanError(
                f"timeline[{i}].at_s", f"must be less than loop_s ({script.loop_s}), got {entry.at_s}"
            )
    for i, trigger in enumerate(script.trigger):
        where = f"trigger[{i}]"
        check_number(trigger.cooldown_s, f"{where}.cooldown_s", 0.0, MAX_PLAN_S)
        if isinstance(trigger, SilenceTrigger):
            check_number(trigger.after_s, f"{where}.after_s", 0.0, MAX_PLAN_S)
            if trigger.after_s <= 0:
                raise PlanError(f"{where}.after_s", f"must be positive, got {trigger.after_s}")
        elif isinstance(trigger, GestureTrigger):
            check_number(trigger.min_confidence, f"{where}.min_confidence", 0.0, 1.0)
        elif isinstance(trigger, SoundTrigger):
            check_number(trigger.min_score, f"{where}.min_score", 0.0, 1.0)
    if len(script.places) > MAX_PLACES:
        raise PlanError("places", f"at most {MAX_PLACES} places, got {len(script.places)}")
    for name, place in script.places.items():
        check_number(place.x, f"places.{name}.x", -1.0, 1.0)
        for j, value in enumerate(place.gaze):
            check_number(value, f"places.{name}.gaze[{j}]", -1.0, 1.0)
    idle = script.idle
    for field in ("every_s", "hold_s", "gaze_every_s"):
        lo, hi = getattr(idle, field)
        check_number(lo, f"idle.{field}[0]", 0.0, MAX_IDLE_S)
        check_number(hi, f"idle.{field}[1]", lo, MAX_IDLE_S)
    check_number(idle.gaze_range, "idle.gaze_range", 0.0, 1.0)
    if len(idle.actions) > MAX_IDLE_ACTIONS:
        raise PlanError("idle.actions", f"at most {MAX_IDLE_ACTIONS} actions, got {len(idle.actions)}")
    known = {a.name for a in manifest.actions}
    for i, action in enumerate(idle.actions):
        if action not in known:
            raise PlanError(f"idle.actions[{i}]", f"unknown action {action!r}; known: {sorted(known)}")


def load_script(name: str, manifest: Manifest, plans_dir: Path = PLANS_DIR) -> Script:
    """Load the script ``plans_dir/NAME.toml``. Safe for names sent by clients: the name is checked against
    ``NAME_PATTERN`` (letters, digits, - and _, at most 64) before it touches the file system, so it cannot
    point outside ``plans_dir``, and no error names the server's paths."""
    if not NAME_PATTERN.fullmatch(name):
        shown = name if len(name) <= 80 else f"{name[:80]}..."
        raise ScriptError("plan", f"a plan name is 1 to 64 letters, digits, - and _, got {shown!r}")
    path = plans_dir / f"{name}.toml"
    if not path.is_file():
        known = sorted(p.stem for p in plans_dir.glob("*.toml"))
        raise ScriptError("plan", f"no plan named {name!r}; known plans: {known}")
    return _load(path, f"plan {name!r}", manifest)


def load_script_file(path: Path, manifest: Manifest) -> Script:
    """Load a script from a TOML file (a trusted path: the command line or a config file)."""
    return _load(path, str(path), manifest)


def _load(path: Path, shown: str, manifest: Manifest) -> Script:
    """Read and validate ``path``; errors call the file ``shown`` (a client is never shown a path)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScriptError("plan", f"cannot read {shown}: {exc.strerror}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ScriptError("plan", f"{shown} is not valid TOML: {exc}") from None
    return script_from_builtins(data, manifest)
