"""Hypothesis strategies for the values and messages a client can send: valid messages generated from the
protocol's own msgspec types (``server.protocol.CLIENT_MESSAGES``, read with ``msgspec.inspect``) and inline
plans (``agent.script.Script``), with names from the capability manifest where a field takes one so that a
fair share gets past validation into the session; then mutated (fields dropped, added, retyped, set to
extreme numbers). ``tests/support/fuzzing.py`` encodes and garbles them into frames.

``tame=True`` keeps out the inputs of the known bugs of issue 12 (``fuzzing.KNOWN_BUGS``).
"""

from __future__ import annotations

import string
from typing import Any

from hypothesis import strategies as st
from msgspec import inspect as mi

from agent import idle, plans, script
from agent.script import Script
from events.gestures import KNOWN_GESTURES
from server import protocol as p
from server.sessions import CHARACTERS
from streaming_model.manifest import ACTION_NAMES, EMOTIONS, SCENE_EVENTS

TAME_DEPTH = 300
"""Tame nesting stays below both known recursion limits (~490 in a plan, ~990 anywhere)."""
TAME_PLAN_NAME = 200
"""Tame plan names stay below the 255-byte file-name limit behind the ``plan_name`` bug."""
TAME_PLAN_SECONDS = 1e4
"""Tame plan times are within +-this; loop_s is at least a chunk (the ``plan_clock`` bug)."""
LOOP_FLOOR_S = 1 / 6
WILD_DEPTH = 700

EXTREME_INTS: tuple[int, ...] = (
    0,
    1,
    -1,
    2**31 - 1,
    -(2**31),
    2**53 + 1,
    2**63 - 1,
    2**63,
    -(2**63),
    -(2**63) - 1,
    2**64 - 1,
    2**64,
    10**30,
    -(10**30),
)
EXTREME_FLOATS: tuple[float, ...] = (
    0.0,
    -0.0,
    5e-324,
    -5e-324,
    2.2250738585072014e-308,
    1e-300,
    1e308,
    -1e308,
    1.7976931348623157e308,
    1e16,
    1.0000000000000002,
    0.9999999999999999,
    -1.0,
    0.5,
)
TAME_FLOATS: tuple[float, ...] = (0.0, -0.0, 1.0, -1.0, 0.5, 1e-3, 2.5, 60.0, 3600.0, -3600.0)

SPECIAL_STRINGS: tuple[str, ...] = (
    "",
    "\x00",
    "a\x00b",
    "\u202etxet desrever\u202c",  # right-to-left override
    "\u200f\u05e9\u05dc\u05d5\u05dd",  # RTL mark and Hebrew
    "\ufeffbom",
    "\U0001f600\U0001f98a",  # emoji
    "\U0001f469\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466",  # a ZWJ family
    "e" + "\u0301" * 200,  # a pile of combining accents
    "\ud800",  # a lone surrogate: JSON escapes it; msgspec must refuse it
    "\udfff\ud800",
    "\U0010ffff\uffff\ufffe",
    "\u2028\u2029",
    "../../../../etc/passwd",
    "%s%n{0}${x}",
    "wave",
    "greeter",
    "\x1b[31mred",
)

# ----------------------------------------------------------------------------------------- values


def strings(max_size: int = 80) -> st.SearchStrategy[str]:
    """Unicode text: anything hypothesis likes (surrogates included), the edge cases above, long runs."""
    return st.one_of(
        st.text(max_size=max_size),
        st.text(st.characters(categories=("Cs", "Cc", "Cf", "Mn", "So")), max_size=max_size),
        st.sampled_from(SPECIAL_STRINGS),
    )


def long_strings() -> st.SearchStrategy[str]:
    """Runs of one character long enough to cost: near and over the 64 KiB text limit once encoded."""
    return st.builds(lambda c, n: c * n, st.sampled_from("a\U0001f600\u0301\x00"), st.integers(1000, 70_000))


def ints() -> st.SearchStrategy[int]:
    return st.one_of(st.integers(-1000, 1000), st.sampled_from(EXTREME_INTS), st.integers())


def floats(tame: bool) -> st.SearchStrategy[float]:
    """JSON-encodable numbers (NaN and infinities cannot be JSON; ``garbled`` sends them as literals)."""
    if tame:
        # Rounded: never printed with an exponent, so that no one-character garble makes 1e300 of them.
        bounded = st.floats(-TAME_PLAN_SECONDS, TAME_PLAN_SECONDS).map(lambda x: round(x, 3))
        return st.one_of(bounded, st.sampled_from(TAME_FLOATS))
    return st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.sampled_from(EXTREME_FLOATS))


def json_values(tame: bool, max_leaves: int = 12) -> st.SearchStrategy[Any]:
    """Any JSON value, nested a little."""
    scalars = st.one_of(st.none(), st.booleans(), ints(), floats(False), strings(40))
    return st.recursive(
        scalars,
        lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(strings(12), inner, max_size=4)),
        max_leaves=max_leaves,
    )


@st.composite
def deep_values(draw: st.DrawFn, tame: bool) -> Any:
    """Lists or objects nested ``depth`` deep (tame: below the known recursion limits). Wild ones reach
    past the ~490 of a plan; ``garble``'s wrap nests text deeper than ``json.dumps`` could write it."""
    depth = draw(st.integers(1, TAME_DEPTH if tame else WILD_DEPTH))
    as_object = draw(st.booleans())
    value: Any = draw(st.sampled_from([1, "x", None, [], {}]))
    for _ in range(depth):
        value = {"a": value} if as_object else [value]
    return value


# ----------------------------------------------------------------------------------------- from types

Overrides = dict[tuple[type, str], st.SearchStrategy[Any]]


def from_type(info: mi.Type, overrides: Overrides, tame: bool) -> st.SearchStrategy[Any]:
    """JSON-ready builtins that fit a msgspec type (``msgspec.inspect`` info), field overrides applied."""
    match info:
        case mi.StructType():
            return struct_dicts(info, overrides, tame)
        case mi.UnionType(types=types):
            return st.one_of([from_type(t, overrides, tame) for t in types])
        case mi.LiteralType(values=values):
            return st.sampled_from(values)
        case mi.StrType():
            return strings()
        case mi.BoolType():
            return st.booleans()
        case mi.IntType():
            return ints()
        case mi.FloatType():
            return st.one_of(floats(tame), st.integers(-10, 10))
        case mi.NoneType():
            return st.none()
        case mi.ListType(item_type=item) | mi.VarTupleType(item_type=item):
            return st.lists(from_type(item, overrides, tame), max_size=4)
        case mi.TupleType(item_types=items):
            return st.tuples(*(from_type(t, overrides, tame) for t in items)).map(list)
        case mi.DictType(value_type=value):
            return st.dictionaries(strings(12), from_type(value, overrides, tame), max_size=3)
        case _:
            return json_values(tame)


def struct_dicts(info: mi.StructType, overrides: Overrides, tame: bool) -> st.SearchStrategy[dict]:
    """Objects for a msgspec Struct: required fields always, optional ones sometimes, its tag when tagged."""
    required: dict[str, st.SearchStrategy[Any]] = {}
    optional: dict[str, st.SearchStrategy[Any]] = {}
    for f in info.fields:
        strategy = _override(info.cls, f.name, overrides)
        if strategy is None:
            strategy = from_type(f.type, overrides, tame)
        (required if f.required else optional)[f.encode_name] = strategy
    if info.tag_field is not None:
        required[info.tag_field] = st.just(info.tag)
    return st.fixed_dictionaries(required, optional=optional)


def _override(cls: type, name: str, overrides: Overrides) -> st.SearchStrategy[Any] | None:
    for klass in cls.__mro__:
        if (klass, name) in overrides:
            return overrides[(klass, name)]
    return None


def _some(values: tuple[str, ...] | frozenset[str]) -> st.SearchStrategy[str]:
    """Mostly a known name (so the input gets past validation), sometimes any string."""
    return st.one_of(st.sampled_from(sorted(values)), st.sampled_from(sorted(values)), strings(20))


# ----------------------------------------------------------------------------------------- plans


def plan_objects(tame: bool) -> st.SearchStrategy[dict]:
    """Inline plans (``plan.run``, ``session.start``): scripts generated from ``agent.script.Script``."""

    def seconds(lo: float, hi: float = TAME_PLAN_SECONDS) -> st.SearchStrategy[float]:
        return st.floats(lo, hi).map(lambda x: round(x, 3))  # no exponent: see ``floats``

    span = st.tuples(seconds(-100.0, 100.0), seconds(-100.0, 100.0)).map(list)
    ids = st.sampled_from(["", "a", "b", "hi", "missing"])
    overrides: Overrides = {
        (plans.Action, "name"): _some(ACTION_NAMES),
        (plans.SceneEvent, "name"): _some(SCENE_EVENTS),
        (plans.Speech, "emotion"): st.one_of(st.none(), _some(EMOTIONS)),
        (plans.Emotion, "emotion"): _some(EMOTIONS),
        (plans.Speech, "text"): strings(60),
        (plans._Behavior, "id"): ids,
        (plans.SyncRef, "to"): ids,
        (script._Trigger, "name"): strings(20),
        (script.GestureTrigger, "gesture"): _some(KNOWN_GESTURES),
        (script.Script, "name"): strings(20),
    }
    if tame:
        overrides |= {
            (script.Script, "loop_s"): st.one_of(st.none(), seconds(-1.0, 0.0), seconds(LOOP_FLOOR_S)),
            (script.TimelineEntry, "at_s"): seconds(-TAME_PLAN_SECONDS),
            (idle.IdleConfig, "every_s"): span,
            (idle.IdleConfig, "hold_s"): span,
            (idle.IdleConfig, "gaze_every_s"): span,
            (idle.IdleConfig, "gaze_range"): seconds(-100.0, 100.0),
        }
    return struct_dicts(mi.type_info(Script), overrides, tame)  # type: ignore[arg-type]


def plan_names(tame: bool) -> st.SearchStrategy[str]:
    longest = TAME_PLAN_NAME if tame else 5000
    return st.one_of(
        st.sampled_from(["greeter", "living_room", "nope", "", "../greeter", "greeter.toml"]),
        st.text(string.ascii_letters + string.digits + "-_", min_size=1, max_size=longest),
        strings(40),
    )


# ----------------------------------------------------------------------------------------- messages


def message_overrides(tame: bool) -> Overrides:
    """Field strategies for the protocol's messages where a plain string or number would nearly always be
    refused by the first check (a gesture name, a plan, a character)."""
    unit = st.one_of(st.floats(0.0, 1.0), floats(False))
    plan = st.one_of(plan_names(tame), plan_objects(tame))
    token = st.text(string.ascii_letters + string.digits + "-_", max_size=40) if tame else strings(40)
    return {
        (p.InputGesture, "gesture"): _some(KNOWN_GESTURES),
        (p.InputGesture, "confidence"): unit,
        (p.InputGesture, "x"): st.one_of(st.none(), unit),
        (p.InputGesture, "y"): st.one_of(st.none(), unit),
        (p.PlanRun, "plan"): plan,
        (p.SessionStart, "plan"): st.one_of(st.none(), plan),
        (p.SessionStart, "character"): st.one_of(st.none(), _some(CHARACTERS)),
        (p.SessionStart, "story"): st.one_of(st.none(), _some(("garden_gate", "lighthouse"))),
        (p.Resume, "resume_token"): token,
        (p.ClientMessage, "ref"): st.one_of(st.none(), st.text(max_size=p.MAX_REF_CHARS), strings(80)),
    }


def valid_messages(tame: bool, kinds: tuple[type[p.ClientMessage], ...] = p.CLIENT_MESSAGES):
    """Message objects that fit their msgspec type (the server may still refuse what they say)."""
    overrides = message_overrides(tame)
    return st.one_of([struct_dicts(mi.type_info(cls), overrides, tame) for cls in kinds])  # type: ignore[arg-type]


@st.composite
def mutated(draw: st.DrawFn, message: dict, tame: bool) -> Any:
    """``message`` with one to three changes: a field dropped, added, retyped, made extreme, or the type
    tag changed; sometimes not an object at all."""
    out: Any = dict(message)
    for _ in range(draw(st.integers(1, 3))):
        if not isinstance(out, dict):
            break
        keys = sorted(out)
        change = draw(
            st.sampled_from(["drop", "add", "retype", "extreme", "deep", "long", "tag", "ref", "unwrap"])
        )
        if change == "drop" and keys:
            del out[draw(st.sampled_from(keys))]
        elif change == "add":
            out[draw(strings(16))] = draw(json_values(tame))
        elif change == "retype" and keys:
            out[draw(st.sampled_from(keys))] = draw(json_values(tame, max_leaves=4))
        elif change == "extreme" and keys:
            out[draw(st.sampled_from(keys))] = draw(
                st.one_of(st.sampled_from(EXTREME_INTS), st.sampled_from(EXTREME_FLOATS))
            )
        elif change == "long":
            out[draw(st.sampled_from([*keys, "extra"]))] = draw(long_strings())
        elif change == "deep":
            out[draw(st.sampled_from([*keys, "extra"]))] = draw(deep_values(tame))
        elif change == "tag":
            out["type"] = draw(
                st.one_of(
                    st.sampled_from(sorted(str(m.__struct_config__.tag) for m in p.CLIENT_MESSAGES)),
                    strings(20),
                    json_values(tame, max_leaves=2),
                )
            )
        elif change == "ref":
            out["ref"] = draw(
                st.one_of(
                    st.text(min_size=p.MAX_REF_CHARS + 1, max_size=200),
                    json_values(tame, max_leaves=2),
                    st.text(max_size=p.MAX_REF_CHARS),
                )
            )
        elif change == "unwrap":
            out = draw(st.sampled_from([list(out.values()), list(out), None, 0, "ping"]))
    return out
