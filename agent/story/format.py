"""The story format: msgspec types for a story file (TOML) and for a branch written during a session.

A story is a set of beats (scenes). Each beat has a description, what the characters want in it, an
entry plan (a plan block, or the name of a scripted plan in examples/plans/) and choices; a choice has a
condition on the story's variables, effects on them and a target beat. A beat marked ``ending`` closes
the story. See docs/story.md and examples/stories/.

Reading only checks shapes; ``agent.story.graph.compile_story`` checks meaning (targets, reachability,
ways out, expressions, plans) and turns a ``StorySpec`` into a playable ``StoryGraph``.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import msgspec

from agent.plan_io import shape_error
from agent.plans import Block
from agent.story.expr import Value

STORIES_DIR = Path(__file__).resolve().parent.parent.parent / "examples" / "stories"
"""Where ``load_story`` looks for a story by name."""

NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
"""Beat, choice, character and story ids: safe to show, to log and to use as file names."""


class Problem(msgspec.Struct, frozen=True):
    """One thing wrong with a story: ``where`` is the path of the bad field (``beats.gate.choices[0].target``)."""

    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


class StoryError(ValueError):
    """A story (or a branch, or a request against a story) that cannot be used; lists every problem."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("; ".join(str(p) for p in problems))

    @classmethod
    def one(cls, where: str, message: str) -> StoryError:
        """An error with a single problem."""
        return cls([Problem(where, message)])


class Character(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """Someone in the story; ``goals`` are what they want throughout (beats add their own)."""

    description: str = ""
    goals: list[str] = []


class Choice(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """A way out of a beat.

    when: a condition (``trust >= 2 and not has_key``); empty means always offered.
    effects: applied in order when the choice is taken (``trust += 1``, ``has_key = true``).
    keywords: extra words that name this choice when the user types freely (the label's words count too).
    scene: parts of the scene the choice changes (``{door = "open"}``), as a plan's ``set_scene`` would,
    as the target beat is entered (its own plan may change the scene further).
    """

    id: str
    label: str
    target: str
    when: str = ""
    effects: list[str] = []
    keywords: list[str] = []
    scene: dict[str, str] = {}


class Beat(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """A scene of the story.

    goals: character id -> what that character wants in this beat.
    plan: what the character does on entering: a plan block (agent/plans.py) or a scripted plan's name.
    ending: the story ends here (an ending has no choices).
    """

    description: str
    title: str = ""
    goals: dict[str, str] = {}
    plan: str | Block | None = None
    choices: list[Choice] = []
    ending: bool = False


class StorySpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """A whole story as written: the immutable graph a session starts from."""

    id: str
    start: str
    beats: dict[str, Beat]
    title: str = ""
    description: str = ""
    seed: int = 0
    variables: dict[str, Value] = {}
    characters: dict[str, Character] = {}


def _shape(exc: msgspec.ValidationError, prefix: str = "") -> StoryError:
    error = shape_error(exc)
    where = error.field if error.field != "$" else ""
    return StoryError.one(".".join(p for p in (prefix, where) if p) or "$", error.message)


def story_from_builtins(data: Any) -> StorySpec:
    """A story from parsed TOML or JSON; a wrong shape raises ``StoryError`` naming the field."""
    if isinstance(data, dict):
        # Tables keyed by id first, one by one: msgspec names a bad field inside a dict value only as
        # ``beats[...]``, and the author needs to know which beat.
        for table, kind in (("beats", Beat), ("characters", Character)):
            entries = data.get(table)
            for key, value in entries.items() if isinstance(entries, dict) else ():
                try:
                    msgspec.convert(value, kind)
                except msgspec.ValidationError as exc:
                    raise _shape(exc, f"{table}.{key}") from None
    try:
        return msgspec.convert(data, StorySpec)
    except msgspec.ValidationError as exc:
        raise _shape(exc) from None


def beat_from_builtins(data: Any, where: str = "beat") -> Beat:
    """A beat (a branch written in a session) from parsed JSON; ``where`` prefixes the error's path."""
    try:
        return msgspec.convert(data, Beat)
    except msgspec.ValidationError as exc:
        raise _shape(exc, where) from None


def story_from_toml(text: str) -> StorySpec:
    """Parse a story from TOML text."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise StoryError.one("$", f"not valid TOML: {exc}") from None
    return story_from_builtins(data)


def load_story_file(path: Path) -> StorySpec:
    """Read a story from a TOML file (a trusted path: the command line, a config file, a test)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise StoryError.one("story", f"cannot read {path}: {exc.strerror}") from None
    return story_from_toml(text)


def load_story(name: str, stories_dir: Path = STORIES_DIR) -> StorySpec:
    """Read ``stories_dir/NAME.toml``. Safe for names sent by clients (``session.start``'s ``story``): only
    letters, digits, - and _ are accepted, so a name cannot point outside ``stories_dir``."""
    if not NAME.match(name):
        raise StoryError.one("story", f"a story name is letters, digits, - and _, got {name!r}")
    path = stories_dir / f"{name}.toml"
    if not path.is_file():
        known = sorted(p.stem for p in stories_dir.glob("*.toml"))
        raise StoryError.one("story", f"no story named {name!r}; known stories: {known}")
    return load_story_file(path)
