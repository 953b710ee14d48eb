"""Speaking a streamed reply's first sentence while the rest still streams (``[director]
speak_while_streaming``).

The Director watches the reply as it streams (``agent.llm.StreamWatcher``). When its first tool call is
``say`` with ``text`` as its first argument and that text holds a whole first sentence, the sentence is
spoken at once: an open speech in the realizer (``Realizer.open_speech``). When the reply is whole, the
``say`` call runs as always and its block closes that speech with the whole text (``extend_speech``: the
same speech id, the mouth and ``character.speech`` follow the one voice). A reply that ends otherwise
(another text, a failure, a cancelled run) closes it with what was said (``EarlySpeech``).

Only the first tool call is watched, and only ``say``: speaking plain text early would be wrong when tool
calls follow it (text beside calls is spoken only when they all fail).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

import msgspec

from agent.plans import Block, Speech
from agent.realizer import Realizer, Submission

_TEXT_FIRST = re.compile(r'\s*\{\s*"text"\s*:\s*"')
SENTENCE_BREAK = re.compile(r"(?<=[.!?…])\s+")
"""The space after a sentence's end: where a reply's text splits into sentences to speak."""
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", '"': '"', "\\": "\\", "/": "/"}
UNDECIDED_CHARS = 32
"""Arguments this long that do not open with ``{"text": "`` never will: the watcher stops."""


def partial_text(arguments: str) -> tuple[str, bool] | None:
    """The ``text`` argument of a call's JSON arguments streamed so far, when it is their first key: the
    characters received (escapes decoded) and whether the string is closed; None when it is not first."""
    opened = _TEXT_FIRST.match(arguments)
    if opened is None:
        return None
    out: list[str] = []
    i, n = opened.end(), len(arguments)
    while i < n:
        c = arguments[i]
        if c == '"':
            return "".join(out), True
        if c != "\\":
            out.append(c)
            i += 1
            continue
        if i + 1 >= n:
            break  # an escape cut in two: wait for its end
        if arguments[i + 1] == "u":
            if i + 6 > n:
                break
            try:
                out.append(json.loads(f'"{arguments[i : i + 6]}"'))
            except ValueError:
                return None
            i += 6
            continue
        out.append(_ESCAPES.get(arguments[i + 1], arguments[i + 1]))
        i += 2
    return "".join(out), False


def first_sentence(text: str, limit: int) -> str | None:
    """The first whole sentence of text still streaming (one followed by more), whitespace made single,
    when it fits in ``limit`` characters."""
    parts = SENTENCE_BREAK.split(text, maxsplit=1)
    if len(parts) < 2:
        return None
    sentence = " ".join(parts[0].split())
    return sentence if sentence and len(sentence) <= limit else None


def continuing(block: Block, spoken: str) -> Block | None:
    """``block`` (a ``say``) with its speech's whitespace made single, when that text continues ``spoken``;
    None when it has no such speech."""
    for b in block.behaviors:
        if isinstance(b, Speech) and b.id == "say":
            text = " ".join(b.text.split())
            if not text.startswith(spoken):
                return None
            said = msgspec.structs.replace(b, text=text)
            return msgspec.structs.replace(block, behaviors=[said if x is b else x for x in block.behaviors])
    return None


class SayWatcher:
    """Watches one streamed reply; calls ``speak(sentence)`` once, when the first ``say`` call's text holds
    a whole first sentence of at most ``limit`` characters."""

    def __init__(self, speak: Callable[[str], None], limit: int) -> None:
        self.speak = speak
        self.limit = limit

    def __call__(self, text: str, name: str | None, arguments: str) -> bool:
        """One look at the reply so far; True when there is nothing more to watch for."""
        if name is None:
            return len(text) > self.limit  # text this long before any call is not waiting for a say
        if name != "say":
            return bool(name) and not "say".startswith(name)
        found = partial_text(arguments)
        if found is None:
            return len(arguments) > UNDECIDED_CHARS
        said, closed = found
        if closed:
            return True  # the whole text came at once: the call itself follows at once
        sentence = first_sentence(said, self.limit)
        if sentence is None:
            return False
        self.speak(sentence)
        return True


@dataclass
class _Early:
    """A reply's first sentence spoken while the reply streams: its open speech's block and text."""

    block_id: str
    text: str


class EarlySpeech:
    """The speech opened from the reply streaming now, until the reply's ``say`` (or its end) closes it."""

    def __init__(self, realizer: Realizer) -> None:
        self.realizer = realizer
        self._early: _Early | None = None

    def opened(self, block_id: str, text: str) -> None:
        """The reply's first sentence ``text`` is speaking, as the open speech of block ``block_id``."""
        self._early = _Early(block_id, text)

    def close(self) -> None:
        """The speech opened early keeps the text it has: nothing of the reply continued it."""
        early, self._early = self._early, None
        if early is not None:
            self.realizer.extend_speech(early.block_id)

    def continue_with(self, block: Block) -> Submission | None:
        """Close the speech opened early, if any: a ``block`` that continues it closes it with its whole
        text, as the same block (the realizer's answer is returned); anything else leaves it as said
        (None: submit ``block`` as usual)."""
        early, self._early = self._early, None
        if early is None:
            return None
        whole = continuing(block, early.text)
        if whole is not None:
            return self.realizer.extend_speech(early.block_id, whole)
        self.realizer.extend_speech(early.block_id)  # something else came first: it stays as said
        return None
