"""Media out on the session's manifest's clock: pts, frame numbering and the voice sliced per frame.

At 16 fps with 12-frame chunks (the ``world`` backend's clock) a frame lasts 62.5 ms, a chunk 0.75 s, and
every frame carries 24000 / 16 = 1500 samples of the character's voice; the default clock stays 24 fps,
4 frames and 1000 samples.
"""

from __future__ import annotations

import numpy as np
import pytest

from agent.plans import Block, Speech
from agent.realizer import Realizer
from server.media import MediaClock
from server.speech import SpeechPlayer
from server.voice import OUTPUT_RATE, Voice
from streaming_model.manifest import build_manifest

SLOW = build_manifest(fps=16, frames_per_chunk=12, width=160, height=96)


def test_the_clock_of_a_manifest_numbers_frames_and_stamps_them() -> None:
    slow, default = MediaClock.of(SLOW), MediaClock.of(build_manifest())
    assert [slow.pts_ms(f) for f in (0, 1, 12, 13)] == [0.0, 62.5, 750.0, 812.5]
    assert slow.first_frame(2) == 24 and slow.chunk_s == pytest.approx(0.75)
    assert slow.samples_per_frame(OUTPUT_RATE) == 1500
    assert [default.pts_ms(f) for f in (0, 1, 4)] == [0.0, 41.667, 166.667]
    assert default.first_frame(2) == 8 and default.samples_per_frame(OUTPUT_RATE) == 1000
    with pytest.raises(ValueError, match="does not divide"):
        MediaClock(fps=7, chunk_frames=3).samples_per_frame(OUTPUT_RATE)


@pytest.fixture(scope="module")
def voice() -> Voice:
    return Voice()


async def test_speech_is_sliced_per_frame_at_the_manifests_rate_and_the_mouth_follows_it(
    voice: Voice,
) -> None:
    realizer = Realizer(manifest=SLOW, voice="server")
    realizer.submit(Block(behaviors=[Speech(text="Hello there, nice to see you.")]))
    (cue,) = realizer.tick(0).speech_start
    player = SpeechPlayer(voice, realizer)
    player.start(cue, 12, cue_frame=0)  # it sounds from chunk 1, the conductor's one-chunk delay
    envelope = await player.envelope(1)
    assert envelope is not None and len(envelope) == 12
    assert await player.envelope(0) == (0.0,) * 12  # cued, not yet sounding
    assert player.slice(11).size == 1500 and not player.slice(11).any()
    # As the conductor does: decide a chunk, then send its frames, each with its slice of the voice.
    outs, slices = [], []
    for k in range(1, 8):
        outs.append(realizer.tick(k))
        slices += [player.slice(f) for f in range(12 * k, 12 * k + 12)]
    assert not player.speaking and {s.size for s in slices} == {1500}
    audio = np.concatenate(slices)
    utterance = voice.synthesize(cue.text)
    n = utterance.samples.size
    assert np.array_equal(audio[:n], utterance.samples) and not audio[n:].any()
    expected = utterance.frame_envelope(16)
    assert envelope == pytest.approx(tuple(expected[:12]))
    # The realizer learned the voice's length and its envelope per frame at 16 fps: the speech spans as many
    # 0.75 s chunks as the audio lasts, and chunk 1's mouth is the voice's loudness in its 12 frames.
    frames = -(-n // 1500)
    assert [o.chunk for o in outs if o.condition.speaking] == list(range(1, 1 + -(-frames // 12)))
    assert outs[0].condition.audio == pytest.approx(tuple(expected[:12]), abs=1e-6)
