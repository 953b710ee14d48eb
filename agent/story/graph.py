"""Validating a story and compiling it into an immutable, playable graph; adding a session's branches.

``compile_story`` checks everything that can be checked before playing, and reports every problem with
the path of the field at fault:

- names: story, beat, choice and character ids are letters, digits, - and _; variables are identifiers;
- targets: every choice leads to a beat that exists; the start beat exists;
- reachability: every beat can be reached from the start by some sequence of choices;
- ways out: every beat can reach an ending. A beat that cannot is reported by the trap it falls into: a
  dead end (not an ending, no choices) or a loop of beats none of whose choices leaves it;
- expressions: conditions and effects parse and type check against the declared variables;
- plans: an inline plan block passes ``validate_block`` against the capability manifest, a named plan
  exists and loads.

Conditions are ignored by the graph checks (a choice might be taken), so "can reach" means "by some
choices", not "under every set of variables".

A session's story is the base graph plus branches written during it (``with_branch``); the base is never
changed, and each branch is validated like a beat of the base plus: its id is new, its choices lead back
into the graph (so it reaches an ending), or it is an ending itself.
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from agent.plan_checks import check_scene, validate_block
from agent.plans import Block, PlanError
from agent.script import PLANS_DIR, Script, load_script
from agent.story.expr import Compiled, Effect, ExprError, Kind, compile_condition, compile_effect, kind_of
from agent.story.format import NAME, Beat, Choice, Problem, StoryError, StorySpec
from streaming_model.manifest import Manifest

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_RESERVED = {"and", "or", "not", "true", "false"}

MAX_BEATS = 500
MAX_CHOICES = 16
"""Bounds that keep a story (and a branch an LLM writes) small enough to show and to check."""


@dataclass(frozen=True)
class CompiledChoice:
    """A choice with its condition and effects parsed."""

    spec: Choice
    condition: Compiled | None
    effects: tuple[Effect, ...]

    @property
    def id(self) -> str:
        return self.spec.id


@dataclass(frozen=True)
class CompiledBeat:
    """A beat ready to play: its plan validated (``block``) or loaded (``script``), its choices parsed."""

    id: str
    spec: Beat
    block: Block | None
    script: Script | None
    choices: tuple[CompiledChoice, ...]
    branch: bool = False

    def choice(self, choice_id: str) -> CompiledChoice | None:
        """The choice with this id, if the beat has one."""
        return next((c for c in self.choices if c.id == choice_id), None)


@dataclass(frozen=True)
class Context:
    """What compiling a beat needs: variable types, characters, the manifest and where named plans are."""

    kinds: Mapping[str, Kind]
    characters: frozenset[str]
    manifest: Manifest
    plans_dir: Path


@dataclass(frozen=True)
class StoryGraph:
    """An immutable story: the base as written plus the branches added in this session (in order)."""

    spec: StorySpec
    beats: Mapping[str, CompiledBeat]
    context: Context
    branches: Mapping[str, Beat] = field(default_factory=lambda: MappingProxyType({}))

    def beat(self, beat_id: str) -> CompiledBeat:
        """The beat with this id (KeyError if there is none: states only ever name beats that exist)."""
        return self.beats[beat_id]

    def with_branch(self, beat_id: str, beat: Beat) -> StoryGraph:
        """This graph plus a new beat ``beat_id``; raises ``StoryError`` listing what is wrong with it."""
        problems: list[Problem] = []
        where = f"branch.{beat_id}" if NAME.match(beat_id) else "branch"
        if not NAME.match(beat_id):
            problems.append(Problem("branch.id", f"a beat id is letters, digits, - and _, got {beat_id!r}"))
        elif beat_id in self.beats:
            problems.append(Problem("branch.id", f"a beat named {beat_id!r} exists already; pick a new id"))
        known = set(self.beats) | {beat_id}
        compiled = _compile_beat(beat_id, beat, self.context, known, where, problems)
        exits = [c for c in beat.choices if c.target in self.beats]
        if (
            not beat.ending
            and not exits
            and not any(p.where.startswith(f"{where}.choices") for p in problems)
        ):
            problems.append(
                Problem(
                    f"{where}.choices",
                    "a branch needs at least one choice leading back into the story (to one of "
                    f"{sorted(self.beats)}), or `ending = true`",
                )
            )
        if problems:
            raise StoryError(problems)
        assert compiled is not None
        compiled = CompiledBeat(
            compiled.id, compiled.spec, compiled.block, compiled.script, compiled.choices, branch=True
        )
        return StoryGraph(
            spec=self.spec,
            beats=MappingProxyType({**self.beats, beat_id: compiled}),
            context=self.context,
            branches=MappingProxyType({**self.branches, beat_id: beat}),
        )


def compile_story(
    spec: StorySpec,
    manifest: Manifest,
    plans_dir: Path = PLANS_DIR,
    branches: Mapping[str, Beat] | None = None,
) -> StoryGraph:
    """Check ``spec`` and build its graph, then add ``branches`` (a resumed session's); raises
    ``StoryError`` with every problem found."""
    problems: list[Problem] = []
    if not NAME.match(spec.id):
        problems.append(Problem("id", f"a story id is letters, digits, - and _, got {spec.id!r}"))
    kinds: dict[str, Kind] = {}
    for name, value in spec.variables.items():
        if not _IDENTIFIER.match(name) or name in _RESERVED or keyword.iskeyword(name):
            problems.append(
                Problem(f"variables.{name}", "a variable name is a letter or _ then letters, digits, _")
            )
        kinds[name] = kind_of(value)
    for name in spec.characters:
        if not NAME.match(name):
            problems.append(Problem(f"characters.{name}", "a character id is letters, digits, - and _"))
    if not spec.beats:
        problems.append(Problem("beats", "a story needs at least one beat"))
    if len(spec.beats) > MAX_BEATS:
        problems.append(Problem("beats", f"at most {MAX_BEATS} beats, got {len(spec.beats)}"))
    if spec.start not in spec.beats:
        problems.append(Problem("start", f"no beat named {spec.start!r}; beats: {sorted(spec.beats)}"))
    context = Context(MappingProxyType(kinds), frozenset(spec.characters), manifest, plans_dir)
    beats: dict[str, CompiledBeat] = {}
    for beat_id, beat in spec.beats.items():
        where = f"beats.{beat_id}"
        if not NAME.match(beat_id):
            problems.append(Problem(where, "a beat id is letters, digits, - and _"))
        compiled = _compile_beat(beat_id, beat, context, set(spec.beats), where, problems)
        if compiled is not None:
            beats[beat_id] = compiled
    edges = {b: [c.target for c in beat.choices if c.target in spec.beats] for b, beat in spec.beats.items()}
    if spec.start in spec.beats:
        reached = _reach(spec.start, edges)
        for beat_id in spec.beats:
            if beat_id not in reached:
                problems.append(
                    Problem(
                        f"beats.{beat_id}",
                        f"unreachable: no sequence of choices from the start ({spec.start!r}) leads here",
                    )
                )
    problems += _traps(spec, edges)
    if problems:
        raise StoryError(problems)
    graph = StoryGraph(spec=spec, beats=MappingProxyType(beats), context=context)
    for beat_id, beat in (branches or {}).items():
        graph = graph.with_branch(beat_id, beat)
    return graph


def _compile_beat(
    beat_id: str, beat: Beat, ctx: Context, known: set[str], where: str, problems: list[Problem]
) -> CompiledBeat | None:
    """Compile one beat, adding what is wrong with it to ``problems`` (None when anything is)."""
    before = len(problems)
    _check_description_and_goals(beat, ctx, where, problems)
    block, script = _compile_plan(beat, ctx, where, problems)
    if beat.ending and beat.choices:
        problems.append(Problem(f"{where}.choices", "an ending has no choices"))
    if len(beat.choices) > MAX_CHOICES:
        problems.append(
            Problem(f"{where}.choices", f"at most {MAX_CHOICES} choices, got {len(beat.choices)}")
        )
    seen: set[str] = set()
    choices = tuple(
        _compile_choice(choice, f"{where}.choices[{i}]", ctx, known, seen, problems)
        for i, choice in enumerate(beat.choices)
    )
    if len(problems) > before:
        return None
    return CompiledBeat(beat_id, beat, block, script, choices)


def _check_description_and_goals(beat: Beat, ctx: Context, where: str, problems: list[Problem]) -> None:
    """Add to ``problems`` a missing description and goals given to characters the story does not have."""
    if not beat.description.strip():
        problems.append(Problem(f"{where}.description", "a beat needs a description"))
    for character in beat.goals:
        if character not in ctx.characters:
            problems.append(
                Problem(
                    f"{where}.goals.{character}",
                    f"unknown character {character!r}; characters: {sorted(ctx.characters)}",
                )
            )


def _compile_plan(
    beat: Beat, ctx: Context, where: str, problems: list[Problem]
) -> tuple[Block | None, Script | None]:
    """The beat's plan as (block, script): a named plan loaded, an inline block validated, at most one of
    them set (neither for a beat without a plan, or one whose plan is wrong: that goes to ``problems``)."""
    if isinstance(beat.plan, str):
        try:
            return None, load_script(beat.plan, ctx.manifest, ctx.plans_dir)
        except PlanError as exc:
            problems.append(Problem(f"{where}.plan", exc.message))
    elif beat.plan is not None:
        try:
            return validate_block(beat.plan, ctx.manifest), None
        except PlanError as exc:
            problems.append(Problem(f"{where}.plan.{exc.field}", exc.message))
    return None, None


def _compile_choice(
    choice: Choice, at: str, ctx: Context, known: set[str], seen: set[str], problems: list[Problem]
) -> CompiledChoice:
    """The choice (its path: ``at``) with its condition and effects parsed, as far as they parse; what is
    wrong with it goes to ``problems``. ``seen``: the ids of the beat's choices before it (this one's is
    added)."""
    _check_choice_fields(choice, at, known, seen, problems)
    condition: Compiled | None = None
    if choice.when.strip():
        try:
            condition = compile_condition(choice.when, ctx.kinds)
        except ExprError as exc:
            problems.append(Problem(f"{at}.when", f"bad condition {choice.when!r}: {exc}"))
    effects: list[Effect] = []
    for j, text in enumerate(choice.effects):
        try:
            effects.append(compile_effect(text, ctx.kinds))
        except ExprError as exc:
            problems.append(Problem(f"{at}.effects[{j}]", f"bad effect {text!r}: {exc}"))
    if choice.scene:
        try:
            check_scene(choice.scene, ctx.manifest, f"{at}.scene")
        except PlanError as exc:
            problems.append(Problem(exc.field, exc.message))
    return CompiledChoice(choice, condition, tuple(effects))


def _check_choice_fields(
    choice: Choice, at: str, known: set[str], seen: set[str], problems: list[Problem]
) -> None:
    """Add to ``problems`` a choice's bad or repeated id, missing label and unknown target; add its id to
    ``seen``."""
    if not NAME.match(choice.id):
        problems.append(Problem(f"{at}.id", f"a choice id is letters, digits, - and _, got {choice.id!r}"))
    elif choice.id in seen:
        problems.append(Problem(f"{at}.id", f"duplicate choice id {choice.id!r} in this beat"))
    seen.add(choice.id)
    if not choice.label.strip():
        problems.append(Problem(f"{at}.label", "a choice needs a label (what the user sees)"))
    if choice.target not in known:
        problems.append(Problem(f"{at}.target", f"unknown target {choice.target!r}; beats: {sorted(known)}"))


def _reach(start: str, edges: Mapping[str, Iterable[str]]) -> set[str]:
    seen = {start}
    todo = [start]
    while todo:
        for nxt in edges.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def _traps(spec: StorySpec, edges: Mapping[str, list[str]]) -> list[Problem]:
    """Beats from which no ending can be reached, reported by the traps they fall into: the strongly
    connected sets of beats with no choice leading out of them."""
    back: dict[str, list[str]] = {b: [] for b in spec.beats}
    for source, targets in edges.items():
        for target in targets:
            back[target].append(source)
    endings = [b for b, beat in spec.beats.items() if beat.ending]
    can_end: set[str] = set()
    for ending in endings:
        can_end |= _reach(ending, back)
    stuck = [b for b in spec.beats if b not in can_end]
    if not stuck:
        return []
    if not endings:
        return [Problem("beats", "the story has no ending: mark at least one beat `ending = true`")]
    reach = {b: _reach(b, edges) for b in stuck}
    problems: list[Problem] = []
    reported: set[str] = set()
    for beat_id in stuck:
        if beat_id in reported:
            continue
        component = sorted(b for b in stuck if b in reach[beat_id] and beat_id in reach[b])
        if any(b not in component for target in component for b in reach[target]):
            continue  # not a trap itself: it leads into one, which is reported
        reported |= set(component)
        if len(component) == 1 and not edges[beat_id] and spec.beats[beat_id].choices:
            continue  # its choices all lead to unknown beats, which are reported as such
        if len(component) == 1 and not edges[beat_id]:
            problems.append(
                Problem(f"beats.{beat_id}", "dead end: not an ending, and no choice leads anywhere")
            )
        elif len(component) == 1:
            problems.append(
                Problem(f"beats.{beat_id}", "a loop with no way out: every choice leads back to this beat")
            )
        else:
            problems.append(
                Problem(
                    f"beats.{beat_id}",
                    f"a loop with no way out: beats {component} lead only to each other, never to an ending",
                )
            )
    return problems
