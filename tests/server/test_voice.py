"""The character's voice: Piper speech at the output rate, word spans for what was heard, a mouth envelope."""

from __future__ import annotations

import asyncio
import os
import sys
import threading

import numpy as np
import pytest

import server.voice
from agent.plans import Block, Speech
from agent.realizer import Realizer
from events.priority import BACKGROUND_NICENESS
from server.media import MediaClock
from server.speech import SpeechPlayer
from server.voice import OUTPUT_RATE, Utterance, Voice
from streaming_model.manifest import build_manifest


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


async def test_a_first_sentence_never_waits_for_a_long_sentence_below_it(monkeypatch) -> None:
    # A reply cut while its long second sentence is synthesised at the background priority, and a new
    # one cued: its first sentence, which a chunk's mouth waits for, must not wait behind the long one
    # (one lock around each whole synthesis made it wait, at a tenth of a core on a busy machine).
    voice = Voice()
    voice.load()
    piper = server.voice._piper()
    running, returned = threading.Event(), []
    model_run = piper.phoneme_ids_to_audio

    def noted(ids, *args, **kwargs):
        running.set()  # the long sentence's model run has begun
        try:
            return model_run(ids, *args, **kwargs)
        finally:
            returned.append(len(ids))

    monkeypatch.setattr(piper, "phoneme_ids_to_audio", noted)
    long = asyncio.ensure_future(voice.synthesize_async(LONG_SENTENCE))
    assert await asyncio.to_thread(running.wait, 10)
    first = await voice.synthesize_async("Yes.", first=True)
    (yes,) = returned  # only "Yes." has come back: the long sentence's run is still going
    assert yes < 20
    assert first.samples.size > 0 and (await long).samples.size > first.samples.size


LONG_SENTENCE = (
    "Then we walked along the long winding road past the old mill and the sleepy village until the sun "
    "went down behind the hills and the first stars came out one by one above the river."
)


MANIFEST = build_manifest(fps=16, frames_per_chunk=12, width=160, height=96)


@pytest.mark.skipif(sys.platform != "linux", reason="per-thread nice values are a Linux feature")
async def test_a_part_the_next_decisions_will_wait_for_is_spoken_at_the_videos_priority() -> None:
    # "Hi." sounds for a third of a second after the frames decided: the sentence after it is needed
    # within URGENT_AHEAD_S, at the video's priority; the third comes when two seconds are ready.
    voice, base = _Niceness(), os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    realizer = Realizer(manifest=MANIFEST, voice="server")
    realizer.submit(Block(behaviors=[Speech(text="Hi. This is the second sentence. And a third one.")]))
    (cue,) = realizer.tick(0).speech_start
    player = SpeechPlayer(voice, realizer)
    clock = MediaClock.of(MANIFEST)
    player.start(cue, clock.first_frame(1), cue_frame=0)
    await player.envelope(0)  # the cue chunk is decided once the first sentence is there
    async with asyncio.timeout(30):
        while len(voice.seen) < 3:  # noqa: ASYNC110 (the player publishes nothing of its own for this)
            await asyncio.sleep(0.01)
    assert voice.seen == [base, base, min(19, base + BACKGROUND_NICENESS)]
