"""The story's tiny expression language: choice conditions and effects, parsed here, never ``eval``-ed.

Conditions are boolean expressions over the story's variables::

    trust >= 2 and not has_key
    (mood == "calm" or trust > 3) and visits_left != 0

Effects assign to one variable::

    trust += 1
    has_key = true
    mood = "angry"

Grammar (lowest precedence first): ``or``, ``and``, ``not``, one comparison (``== != < <= > >=``), ``+``
and ``-``, unary ``-``, then atoms: numbers, strings in single or double quotes, ``true``/``false``,
variable names and parentheses. Everything is type checked at load time against the declared variables
(bool, number or string), so a story that loads cannot fail while it plays.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

Value = bool | int | float | str
"""A story variable's value."""

Kind = Literal["bool", "number", "str"]
Env = Mapping[str, Value]
Evaluator = Callable[[Env], Value]

MAX_LENGTH = 500
"""Longest expression accepted (a branch written by an LLM must stay small)."""
MAX_DEPTH = 20
"""Deepest nesting of parentheses (the parser recurses; this keeps it far from Python's limit)."""


class ExprError(ValueError):
    """An expression that cannot be used: the message says what is wrong and at which column."""


def kind_of(value: Value) -> Kind:
    """The type of a variable's value (a bool is not a number here, though Python thinks so)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return "str"


# ------------------------------------------------------------------------------------------ lexing

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<number>\d+(?:\.\d+)?)
      | (?P<string>"[^"\\]*"|'[^'\\]*')
      | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
      | (?P<op>==|!=|<=|>=|\+=|-=|[<>=+\-()])
    )""",
    re.VERBOSE,
)
_KEYWORDS = {"and", "or", "not", "true", "false"}


@dataclass(frozen=True)
class _Token:
    kind: Literal["number", "string", "name", "op", "keyword", "end"]
    text: str
    column: int


def _tokens(text: str) -> list[_Token]:
    if len(text) > MAX_LENGTH:
        raise ExprError(f"too long: at most {MAX_LENGTH} characters, got {len(text)}")
    out: list[_Token] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        match = _TOKEN.match(text, pos)
        if match is None or match.lastgroup is None:
            column = pos + len(text[pos:]) - len(text[pos:].lstrip()) + 1
            raise ExprError(f"unexpected character {text[column - 1]!r} at column {column}")
        kind = match.lastgroup
        value = match.group(kind)
        column = match.start(kind) + 1
        if kind == "name" and value in _KEYWORDS:
            kind = "keyword"
        out.append(_Token(kind, value, column))  # type: ignore[arg-type]  # the regex's group names are the kinds
        pos = match.end()
    out.append(_Token("end", "", len(text) + 1))
    return out


# ----------------------------------------------------------------------------------------- parsing


@dataclass(frozen=True)
class Compiled:
    """A parsed, type-checked expression: its source, its type, the variables it reads, and how to
    evaluate it against the variables."""

    source: str
    kind: Kind
    reads: frozenset[str]
    evaluate: Evaluator


_COMPARE: dict[str, Callable[[Value, Value], bool]] = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


class _Parser:
    """Recursive descent over the tokens; every node is type checked as it is built."""

    def __init__(self, text: str, variables: Mapping[str, Kind]) -> None:
        self.text = text
        self.variables = variables
        self.tokens = _tokens(text)
        self.i = 0
        self.depth = 0
        self.reads: set[str] = set()

    @property
    def peek(self) -> _Token:
        return self.tokens[self.i]

    def take(self) -> _Token:
        token = self.tokens[self.i]
        self.i += 1
        return token

    def accept(self, *texts: str) -> _Token | None:
        if self.peek.kind in ("op", "keyword") and self.peek.text in texts:
            return self.take()
        return None

    def fail(self, message: str, token: _Token | None = None) -> ExprError:
        token = token or self.peek
        where = "at the end" if token.kind == "end" else f"at column {token.column} ({token.text!r})"
        return ExprError(f"{message} {where}")

    def expect_end(self) -> None:
        if self.peek.kind != "end":
            raise self.fail("unexpected")

    def need(self, kind: Kind, got: Kind, what: str, token: _Token) -> None:
        if kind != got:
            raise self.fail(f"{what} needs a {kind}, got a {got}", token)

    def expression(self) -> tuple[Kind, Evaluator]:
        return self.disjunction()

    def _logical(
        self,
        word: str,
        inner: Callable[[], tuple[Kind, Evaluator]],
        combine: Callable[[list[Evaluator]], Evaluator],
    ) -> tuple[Kind, Evaluator]:
        start = self.peek
        kind, first = inner()
        parts = [first]
        while self.accept(word) is not None:
            self.need("bool", kind, f"`{word}`", start)
            right_start = self.peek
            right_kind, right = inner()
            self.need("bool", right_kind, f"`{word}`", right_start)
            parts.append(right)
        return (kind, first) if len(parts) == 1 else ("bool", combine(parts))

    def disjunction(self) -> tuple[Kind, Evaluator]:
        return self._logical("or", self.conjunction, lambda ps: lambda env: any(p(env) for p in ps))

    def conjunction(self) -> tuple[Kind, Evaluator]:
        return self._logical("and", self.negation, lambda ps: lambda env: all(p(env) for p in ps))

    def negation(self) -> tuple[Kind, Evaluator]:
        if self.accept("not") is not None:
            start = self.peek
            kind, inner = self.negation()
            self.need("bool", kind, "`not`", start)
            return "bool", lambda env: not inner(env)
        return self.comparison()

    def comparison(self) -> tuple[Kind, Evaluator]:
        left_kind, left = self.sum()
        op = self.accept(*_COMPARE)
        if op is None:
            return left_kind, left
        right_kind, right = self.sum()
        if left_kind != right_kind:
            raise self.fail(f"cannot compare a {left_kind} with a {right_kind}", op)
        if op.text not in ("==", "!=") and left_kind != "number":
            raise self.fail(f"`{op.text}` compares numbers only, got a {left_kind}", op)
        if self.peek.text in _COMPARE and self.peek.kind == "op":
            raise self.fail("comparisons do not chain; use `and`")
        compare = _COMPARE[op.text]
        return "bool", lambda env: compare(left(env), right(env))

    def sum(self) -> tuple[Kind, Evaluator]:
        start = self.peek
        kind, value = self.unary()
        while (op := self.accept("+", "-")) is not None:
            self.need("number", kind, f"`{op.text}`", start)
            right_start = self.peek
            right_kind, right = self.unary()
            self.need("number", right_kind, f"`{op.text}`", right_start)
            value = _arith(op.text, value, right)
        return kind, value

    def unary(self) -> tuple[Kind, Evaluator]:
        if self.accept("-") is not None:
            start = self.peek
            kind, inner = self.unary()
            self.need("number", kind, "unary `-`", start)
            return "number", lambda env: -inner(env)  # type: ignore[operator]  # need() made it a number
        return self.atom()

    def atom(self) -> tuple[Kind, Evaluator]:
        token = self.take()
        if token.kind == "number":
            number: int | float = float(token.text) if "." in token.text else int(token.text)
            return "number", lambda env: number
        if token.kind == "string":
            text = token.text[1:-1]
            return "str", lambda env: text
        if token.kind == "keyword" and token.text in ("true", "false"):
            flag = token.text == "true"
            return "bool", lambda env: flag
        if token.kind == "name":
            kind = self.variables.get(token.text)
            if kind is None:
                known = ", ".join(sorted(self.variables)) or "none"
                raise self.fail(f"unknown variable {token.text!r} (variables: {known})", token)
            name = token.text
            self.reads.add(name)
            return kind, lambda env: env[name]
        if token.kind == "op" and token.text == "(":
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise self.fail(f"more than {MAX_DEPTH} nested parentheses", token)
            kind, inner = self.expression()
            self.depth -= 1
            if self.accept(")") is None:
                raise self.fail("expected `)`")
            return kind, inner
        raise self.fail("expected a value, a variable or `(`", token)


def _arith(op: str, left: Evaluator, right: Evaluator) -> Evaluator:
    if op == "+":
        return lambda env: left(env) + right(env)  # type: ignore[operator]  # both checked numbers
    return lambda env: left(env) - right(env)  # type: ignore[operator]  # both checked numbers


def compile_condition(text: str, variables: Mapping[str, Kind]) -> Compiled:
    """Parse a condition; it must be boolean. Raises ``ExprError`` naming the problem and its column."""
    if not text.strip():
        raise ExprError("empty condition")
    parser = _Parser(text, variables)
    kind, evaluate = parser.expression()
    parser.expect_end()
    if kind != "bool":
        raise ExprError(f"a condition must be true or false, this is a {kind}")
    return Compiled(text, kind, frozenset(parser.reads), evaluate)


@dataclass(frozen=True)
class Effect:
    """A parsed effect: ``target`` gets ``value`` (``=``), or is raised or lowered by it (``+=``, ``-=``)."""

    source: str
    target: str
    op: Literal["=", "+=", "-="]
    value: Evaluator

    def apply(self, variables: Env) -> dict[str, Value]:
        """A copy of ``variables`` with this effect applied."""
        out = dict(variables)
        given = self.value(variables)
        if self.op == "=":
            out[self.target] = given
        elif self.op == "+=":
            out[self.target] = variables[self.target] + given  # type: ignore[operator]  # += is number-only
        else:
            out[self.target] = variables[self.target] - given  # type: ignore[operator]  # -= is number-only
        return out


def compile_effect(text: str, variables: Mapping[str, Kind]) -> Effect:
    """Parse an effect ``name = expr``, ``name += expr`` or ``name -= expr`` against the variables' types."""
    parser = _Parser(text, variables)
    target = parser.take()
    if target.kind != "name":
        raise parser.fail("an effect starts with a variable name", target)
    if target.text not in variables:
        known = ", ".join(sorted(variables)) or "none"
        raise parser.fail(f"unknown variable {target.text!r} (variables: {known})", target)
    op = parser.accept("=", "+=", "-=")
    if op is None:
        raise parser.fail("expected `=`, `+=` or `-=`")
    start = parser.peek
    kind, value = parser.expression()
    parser.expect_end()
    wanted = variables[target.text]
    if op.text != "=" and wanted != "number":
        raise parser.fail(f"`{op.text}` needs a number variable; {target.text!r} is a {wanted}", op)
    parser.need(wanted, kind, f"{target.text!r}", start)
    return Effect(text, target.text, op.text, value)  # type: ignore[arg-type]  # accept() took one of the three
