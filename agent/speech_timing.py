"""Speech on a clock before the voice reports it: how long a text takes to say, when one of its words is
spoken, and which words a listener heard before a cut.

Durations are estimates from the characters spoken until the voice reports the real one; within a speech
the time is spread evenly over its characters.
"""

from __future__ import annotations

import re

SECONDS_PER_CHAR = 0.065
"""Speech duration estimate until the voice reports the real one (about 15 characters per second)."""
SPEECH_PAD_S = 0.3


def speech_words(text: str) -> list[str]:
    """The words of ``text`` as matched by ``SyncRef.word``: lower case, punctuation stripped."""
    return [w for w in (re.sub(r"[^\w']", "", t).lower() for t in text.split()) if w]


def estimate_speech_s(text: str) -> float:
    """A duration estimate for speaking ``text``, used until the voice reports the real one."""
    return SPEECH_PAD_S + SECONDS_PER_CHAR * len(text.strip())


def word_time(text: str, duration_s: float, word: str, occurrence: int = 1) -> float | None:
    """When the ``occurrence``-th ``word`` starts, spreading ``duration_s`` over the characters spoken."""
    tokens = text.split()
    total = sum(len(t) + 1 for t in tokens) or 1
    target = speech_words(word)
    if len(target) != 1:
        return None
    seen = 0
    chars = 0
    for t in tokens:
        if speech_words(t) == target:
            seen += 1
            if seen == occurrence:
                return duration_s * chars / total
        chars += len(t) + 1
    return None


def heard_prefix(text: str, duration_s: float, played_s: float) -> str:
    """The words of ``text`` fully played within ``played_s`` (what a listener heard before a cut)."""
    tokens = text.split()
    total = sum(len(t) + 1 for t in tokens) or 1
    chars = 0
    heard: list[str] = []
    for t in tokens:
        chars += len(t) + 1
        if duration_s * (chars - 1) / total <= played_s + 1e-9:
            heard.append(t)
        else:
            break
    return " ".join(heard)
