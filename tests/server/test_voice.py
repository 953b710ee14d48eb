"""The character's voice: Piper speech at the output rate, word spans for what was heard, a mouth envelope."""

from __future__ import annotations

import os
import sys
import threading

import numpy as np
import pytest

from events.priority import BACKGROUND_NICENESS
from server.voice import OUTPUT_RATE, Utterance, Voice


@pytest.fixture(scope="module")
def utterance():
    return Voice().synthesize("Hello there. Who is at the door today?")


def test_speech_comes_out_at_one_thousand_samples_per_video_frame(utterance) -> None:
    assert utterance.rate == OUTPUT_RATE == 24 * 1000
    assert 1.5 < utterance.duration_ms / 1000 < 5.0
    assert np.abs(utterance.samples).max() > 0.1


def test_every_word_has_an_ordered_span_inside_the_audio(utterance) -> None:
    assert [w.word for w in utterance.words] == "Hello there. Who is at the door today?".split()
    ends = [w.end for w in utterance.words]
    starts = [w.start for w in utterance.words]
    assert starts == sorted(starts) and ends == sorted(ends)
    assert all(w.start < w.end for w in utterance.words)
    assert ends[-1] <= utterance.samples.size


def test_heard_text_holds_only_the_words_played_in_full(utterance) -> None:
    assert utterance.heard_text(0) == ""
    assert utterance.heard_text(utterance.samples.size) == "Hello there. Who is at the door today?"
    second = utterance.words[1]
    assert utterance.heard_text(second.end) == "Hello there."
    assert utterance.heard_text(second.end - 1) == "Hello"


def test_the_mouth_envelope_is_open_in_speech_and_closed_in_the_pause_between_sentences(utterance) -> None:
    env = utterance.frame_envelope(24)
    assert env.shape == (-(-utterance.samples.size // 1000),)
    assert env.min() >= 0.0 and env.max() <= 1.0
    frames = lambda a, b: env[a // 1000 : b // 1000]  # noqa: E731
    hello, there, who = utterance.words[:3]
    assert frames(hello.start, there.end).mean() > 0.4
    gap = frames(there.end + 1500, who.start - 1500)
    assert gap.size == 0 or gap.mean() < frames(hello.start, there.end).mean() / 2


def test_empty_text_gives_an_empty_utterance() -> None:
    empty = Voice().synthesize("  ... ")
    assert empty.samples.size == 0 and empty.words == () and empty.heard_text(100) == ""


class _Niceness(Voice):
    """The real voice, noting the nice value of the thread each synthesis runs on."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[int] = []

    def synthesize(self, text: str) -> Utterance:
        self.seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        return super().synthesize(text)


@pytest.mark.skipif(sys.platform != "linux", reason="per-thread nice values are a Linux feature")
async def test_a_first_sentence_is_spoken_at_the_videos_priority_and_the_rest_below_it() -> None:
    # The mouth of a chunk waits for the first sentence; the rest is synthesised while it plays.
    voice, base = _Niceness(), os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    await voice.synthesize_async("Hello there.", first=True)
    await voice.synthesize_async("Who is at the door today?")
    assert voice.seen == [base, min(19, base + BACKGROUND_NICENESS)]
