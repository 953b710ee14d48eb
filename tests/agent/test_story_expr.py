"""The story's condition and effect language: parsed and type checked by hand, never eval-ed."""

from __future__ import annotations

import re

import pytest

from agent.story.expr import ExprError, Kind, Value, compile_condition, compile_effect

KINDS: dict[str, Kind] = {"trust": "number", "has_key": "bool", "mood": "str", "storm": "number"}


@pytest.mark.parametrize(
    ("text", "env", "expected"),
    [
        ("trust >= 2 and not has_key", {"trust": 2, "has_key": False}, True),
        ("trust >= 2 and not has_key", {"trust": 2, "has_key": True}, False),
        ('(mood == "calm" or trust > 3) and storm != 0', {"mood": "calm", "trust": 0, "storm": 1}, True),
        ("mood == 'calm' or trust > 3", {"mood": "angry", "trust": 0}, False),
        ("trust + storm - 1 > -1", {"trust": 0, "storm": 0}, False),
        ("not not has_key", {"has_key": True}, True),
        ("trust == 1.5", {"trust": 1.5}, True),
    ],
)
def test_conditions_evaluate_against_the_variables(text: str, env: dict, expected: bool) -> None:
    assert compile_condition(text, KINDS).evaluate(env) is expected


def test_a_condition_knows_the_variables_it_reads() -> None:
    assert compile_condition("trust >= 2 and not has_key", KINDS).reads == {"trust", "has_key"}


def test_effects_assign_raise_and_lower_without_touching_the_input() -> None:
    start: dict[str, Value] = {"trust": 1, "has_key": False, "mood": "calm", "storm": 0}
    after = compile_effect("trust += 2", KINDS).apply(start)
    after = compile_effect("has_key = true", KINDS).apply(after)
    after = compile_effect("mood = 'angry'", KINDS).apply(after)
    after = compile_effect("storm -= trust", KINDS).apply(after)
    assert after == {"trust": 3, "has_key": True, "mood": "angry", "storm": -3}
    assert start == {"trust": 1, "has_key": False, "mood": "calm", "storm": 0}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("trust >= ", "expected a value, a variable or `(` at the end"),
        ("trust and has_key", "`and` needs a bool, got a number at column 1"),
        ("luck > 1", "unknown variable 'luck' (variables: has_key, mood, storm, trust) at column 1"),
        ('mood < "a"', "`<` compares numbers only, got a str at column 6"),
        ("trust", "a condition must be true or false, this is a number"),
        ("1 < trust < 3", "comparisons do not chain; use `and` at column 11"),
        ("trust @ 2", "unexpected character '@' at column 7"),
        ("(trust > 1", "expected `)` at the end"),
        ("has_key == 1", "cannot compare a bool with a number at column 9"),
        ("__import__('os')", "unknown variable '__import__'"),
        ("", "empty condition"),
        ("(" * 200 + "true" + ")" * 200, "more than 20 nested parentheses at column 21"),
        ("not " * 130 + "true", "too long: at most 500 characters, got 524"),
    ],
)
def test_bad_conditions_say_what_is_wrong_and_where(text: str, message: str) -> None:
    with pytest.raises(ExprError, match=re.escape(message)):
        compile_condition(text, KINDS)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("trust = true", "'trust' needs a number, got a bool at column 9"),
        ("has_key += 1", "`+=` needs a number variable; 'has_key' is a bool"),
        ("luck = 1", "unknown variable 'luck'"),
        ("3 = 4", "an effect starts with a variable name"),
        ("trust", "expected `=`, `+=` or `-=` at the end"),
        ("mood = 'ok' extra", "unexpected at column 13"),
    ],
)
def test_bad_effects_say_what_is_wrong_and_where(text: str, message: str) -> None:
    with pytest.raises(ExprError, match=re.escape(message)):
        compile_effect(text, KINDS)
