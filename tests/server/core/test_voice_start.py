"""Where the character's voice starts (``[server] voice_start``) and what it synthesises first
(``voice_first_clause``), on the ``world`` backend's clock: 16 fps, 12-frame chunks of 0.75 s."""

from __future__ import annotations

import asyncio
import math

import msgspec
import numpy as np
import pytest

from agent.minds import Minds
from agent.plans import Block, Speech
from agent.realizer import Realizer, SpeechCue
from events.bus import EventBus
from server.config import ServerConfig
from server.core.decider import Decider
from server.media import MediaClock
from server.speech import REST_SYNTHESIS_S, SpeechConfig, SpeechPlayer, VoiceStart, speech_parts
from server.voice import Utterance, Voice
from streaming_model.manifest import build_manifest

SLOW = build_manifest(fps=16, frames_per_chunk=12, width=160, height=96)
TEXT = "Hello there, nice to see you. Ask me anything."


@pytest.fixture(scope="module")
def voice() -> Voice:
    return Voice()


def cued(text: str = TEXT) -> tuple[Realizer, SpeechCue]:
    realizer = Realizer(manifest=SLOW, voice="server")
    realizer.submit(Block(behaviors=[Speech(text=text)]))
    (cue,) = realizer.tick(0).speech_start
    return realizer, cue


def on_time_from_frame_0(voice: Voice) -> tuple[SpeechPlayer, SpeechCue]:
    """A player with ``voice_start = "on_time"`` whose voice, cued in chunk 0, starts there."""
    realizer, cue = cued()
    player = SpeechPlayer(voice, realizer, config=SpeechConfig(start="on_time", first_clause=True))
    player.start(cue, 0, cue_frame=0)
    return player, cue


async def ready(player: SpeechPlayer, chunk: int) -> None:
    """Until the voice's first audio is synthesised (it then sounds in ``chunk``)."""
    async with asyncio.timeout(10):
        # The player publishes no event of its own for this: look at it as the next decision would.
        while not player.sounding(chunk):  # noqa: ASYNC110
            await asyncio.sleep(0.005)


async def sent(player: SpeechPlayer, frames: range) -> np.ndarray:
    """The audio of ``frames`` as the conductor sends it: each chunk's mouth decided before its frames."""
    out = []
    for f in frames:
        if f == frames.start or f % SLOW.frames_per_chunk == 0:
            await player.envelope(f // SLOW.frames_per_chunk)
        out.append(player.slice(f))
    return np.concatenate(out)


def test_the_first_clause_is_its_own_part_only_when_both_sides_hold_words() -> None:
    sentences = Voice.sentences(TEXT)
    assert speech_parts(sentences, first_clause=True) == [
        "Hello there,",
        "nice to see you.",
        "Ask me anything.",
    ]
    assert speech_parts(sentences, first_clause=False) == sentences
    assert speech_parts(["No comma here."], first_clause=True) == ["No comma here."]
    assert speech_parts(["Well, ..."], first_clause=True) == ["Well, ..."]
    assert speech_parts(["Yes, yes, yes."], first_clause=True) == ["Yes,", "yes, yes."]


async def test_with_the_first_clause_apart_the_voice_plays_the_parts_one_after_another(voice: Voice) -> None:
    realizer, cue = cued()
    player = SpeechPlayer(voice, realizer, config=SpeechConfig(first_clause=True))
    player.start(cue, 12, cue_frame=0)
    audio = await sent(player, range(12, 12 + 12 * 8))
    parts = [voice.synthesize(t) for t in ("Hello there,", "nice to see you.", "Ask me anything.")]
    expected = np.concatenate([p.samples for p in parts])
    assert np.array_equal(audio[: expected.size], expected) and not audio[expected.size :].any()
    # What was heard of it is told word by word across the parts.
    realizer.tick(1)
    player.start(cue, 12 * 9, cue_frame=12 * 9)  # once more, cut after the first clause's audio
    await player.envelope(10)
    clause = -(-parts[0].samples.size // player.per_frame)
    for f in range(12 * 9, 12 * 9 + clause):
        player.slice(f)
    assert player.interrupt(12 * 9 + clause) == "Hello there,"


async def test_when_ready_the_voice_starts_with_the_first_frame_sent_after_its_audio_is_ready(
    voice: Voice,
) -> None:
    realizer, cue = cued()
    player = SpeechPlayer(voice, realizer, config=SpeechConfig(start="when_ready", first_clause=True))
    player.start(cue, 0, cue_frame=0, wait=False)
    # Decided before any audio is there: the cue chunk's mouth is closed at once, nothing waits.
    assert await asyncio.wait_for(player.envelope(0), 0.001) == (0.0,) * 12
    assert not player.sounding(0)
    early = [player.slice(f) for f in range(3)]  # three frames go out before the audio is ready
    assert not np.concatenate(early).any()
    await ready(player, 0)
    utterance = voice.synthesize("Hello there,").then(voice.synthesize("nice to see you. Ask me anything."))
    # The next chunk's mouth follows the voice as it sounds, three frames in.
    realizer.tick(1)
    envelope = utterance.frame_envelope(SLOW.fps)
    assert await player.envelope(1) == pytest.approx(tuple(envelope[9:21]))
    audio = await sent(player, range(3, 3 + 12 * 8))
    assert np.array_equal(audio[: utterance.samples.size], utterance.samples)  # from frame 3, whole


async def test_next_chunk_keeps_the_cue_chunk_silent_and_its_mouth_waits_for_the_audio(voice: Voice) -> None:
    realizer, cue = cued()
    player = SpeechPlayer(voice, realizer, config=SpeechConfig(start="next_chunk", first_clause=True))
    player.start(cue, 12, cue_frame=0)
    assert await player.envelope(0) == (0.0,) * 12
    envelope = await player.envelope(1)  # waits for the synthesis of chunk 1's audio
    utterance = voice.synthesize("Hello there,").then(voice.synthesize("nice to see you."))
    assert envelope == pytest.approx(tuple(utterance.frame_envelope(SLOW.fps)[:12]))
    assert not np.concatenate([player.slice(f) for f in range(12)]).any()


async def test_cue_chunk_starts_the_voice_with_the_chunk_that_cued_it_its_mouth_waiting_for_the_audio(
    voice: Voice,
) -> None:
    # The cue chunk's decision waits for the first part either way (the realizer must hear its length
    # before it plans on): starting there costs no more waiting, and the voice sounds a chunk sooner.
    realizer = Realizer(manifest=SLOW, voice="server")
    realizer.submit(Block(behaviors=[Speech(text=TEXT)]))
    player = SpeechPlayer(voice, realizer, config=SpeechConfig(start="cue_chunk", first_clause=True))
    media = MediaClock.of(SLOW)
    decision = await Decider(Minds(realizer, EventBus()), player, media, lambda: 0).decide(0, 0)
    utterance = voice.synthesize("Hello there,").then(voice.synthesize("nice to see you."))
    assert decision.out.condition.speaking
    assert decision.out.condition.audio == pytest.approx(tuple(utterance.frame_envelope(SLOW.fps)[:12]))
    audio = np.concatenate([player.slice(f) for f in range(12)])
    assert np.array_equal(audio, utterance.samples[: audio.size])


async def test_a_first_audio_not_ready_by_the_chunks_deadline_closes_its_mouth_and_starts_when_ready(
    voice: Voice,
) -> None:
    # Waiting longer would make the cue chunk late: it goes out at once with its mouth closed, and the
    # voice starts with the first frame sent after its audio is ready (as ``when_ready`` does).
    player, _ = on_time_from_frame_0(voice)
    late = asyncio.Event()
    late.set()
    assert await asyncio.wait_for(player.envelope(0, late), 0.001) == (0.0,) * 12
    assert player.overdue == 1
    early = [player.slice(f) for f in range(3)]  # three frames go out before the audio is ready
    assert not np.concatenate(early).any()
    await ready(player, 0)
    utterance = voice.synthesize("Hello there,").then(voice.synthesize("nice to see you. Ask me anything."))
    audio = await sent(player, range(3, 3 + 12 * 8))
    assert np.array_equal(audio[: utterance.samples.size], utterance.samples)  # from frame 3, whole


async def test_a_deadline_that_comes_while_the_mouth_waits_releases_it_and_one_not_reached_changes_nothing(
    voice: Voice,
) -> None:
    player, cue = on_time_from_frame_0(voice)
    late = asyncio.Event()
    waiting = asyncio.ensure_future(player.envelope(0, late))
    await asyncio.sleep(0)  # the mouth waits for the first audio
    assert not waiting.done()
    late.set()
    assert await asyncio.wait_for(waiting, 1) == (0.0,) * 12
    # Another voice whose audio comes before its deadline: the mouth is the voice's, as without one.
    player.start(cue, 12 * 20, cue_frame=12 * 20)
    envelope = await player.envelope(20, asyncio.Event())
    utterance = voice.synthesize("Hello there,").then(voice.synthesize("nice to see you."))
    assert envelope == pytest.approx(tuple(utterance.frame_envelope(SLOW.fps)[:12]))
    assert player.overdue == 1


async def test_a_voice_out_of_audio_past_the_deadline_pauses_to_the_chunks_end_and_goes_on_whole(
    voice: Voice,
) -> None:
    parts = [voice.synthesize(t) for t in ("Hello there,", "nice to see you.", "Ask me anything.")]
    player, _ = on_time_from_frame_0(voice)
    per_frame = player.per_frame
    assert 12 * per_frame <= parts[0].samples.size < 24 * per_frame  # the clause ends inside chunk 1
    await player.envelope(0)  # the first clause is there; the rest is being synthesised
    late = asyncio.Event()
    late.set()
    # Nothing yields in between: the rest of the sentence cannot have come yet.
    envelope = await player.envelope(1, late)
    assert envelope is not None and player.overdue == 1
    spoken = -(-parts[0].samples.size // per_frame) - 12  # chunk 1's frames with some of the clause
    assert not any(envelope[spoken:])  # the pause: the mouth closed to the end of the chunk
    audio = await sent(player, range(12 * 10))
    pause = np.zeros(24 * per_frame - parts[0].samples.size, dtype=np.float32)
    expected = np.concatenate([parts[0].samples, pause, parts[1].samples, parts[2].samples])
    assert np.array_equal(audio[: expected.size], expected)  # every word, after the pause


async def test_only_on_time_lets_a_decision_past_its_deadline_go_without_the_voice(voice: Voice) -> None:
    # The protocol promises the same frames for the same inputs: ``cue_chunk`` waits for the audio even
    # past the deadline; ``on_time`` trades that for a chunk that is never late for its voice.
    overdue = asyncio.Event()
    overdue.set()
    modes: tuple[tuple[VoiceStart, bool], ...] = (("cue_chunk", False), ("on_time", True))
    for start, closed in modes:
        realizer = Realizer(manifest=SLOW, voice="server")
        realizer.submit(Block(behaviors=[Speech(text=TEXT)]))
        player = SpeechPlayer(voice, realizer, config=SpeechConfig(start=start, first_clause=True))
        decider = Decider(Minds(realizer, EventBus()), player, MediaClock.of(SLOW), lambda: 0)
        decision = await decider.decide(0, 0, overdue)
        assert (decision.out.condition.audio == (0.0,) * 12) == closed, start
        assert player.overdue == int(closed)


def test_the_server_table_names_the_switches_and_starts_with_the_cue_chunk_by_default() -> None:
    assert ServerConfig().speech() == SpeechConfig(start="cue_chunk", first_clause=True, redirects=True)
    quick = ServerConfig(voice_start="when_ready", voice_first_clause=False, voice_redirects=False).speech()
    assert quick == SpeechConfig(start="when_ready", first_clause=False, redirects=False)


@pytest.mark.parametrize(
    ("manifest", "ahead"),
    [(SLOW, 1), (build_manifest(fps=24, frames_per_chunk=4, width=160, height=96), 2)],
    ids=["0.75 s chunks", "167 ms chunks"],
)
async def test_the_rest_of_open_speech_whose_voice_ran_out_starts_0_3_s_after_the_chunk_decided(
    voice: Voice, manifest, ahead: int
) -> None:
    # A reply streams: its first sentence is spoken while the rest is still coming, and the voice runs
    # out before it comes. The rest then starts with the first chunk REST_SYNTHESIS_S after the one being
    # decided (a chunk later on 0.75 s chunks, two on 167 ms ones): synthesis gets that long, and the
    # decision that takes the rest rarely waits for it (on the loaded soak machine, with one 167 ms chunk,
    # those decisions waited 110-280 ms and their chunks were late).
    assert ahead == math.ceil(REST_SYNTHESIS_S / manifest.chunk_s)
    realizer = Realizer(manifest=manifest, voice="server")
    block = Block(behaviors=[Speech(id="say", text="Sure.")])
    opened = realizer.open_speech(block)
    assert opened.accepted
    player = SpeechPlayer(voice, realizer, config=SpeechConfig())
    media = MediaClock.of(manifest)
    decider = Decider(Minds(realizer, EventBus()), player, media, lambda: 0)
    sure = voice.synthesize("Sure.").samples
    per_chunk = player.per_frame * manifest.frames_per_chunk
    taken = -(-sure.size // per_chunk) + 1  # chunk 0 cues "Sure."; the voice runs out before this chunk
    audio = []
    for m in range(taken):
        await decider.decide(m, m)
        audio += [player.slice(f) for f in range(media.first_frame(m), media.first_frame(m + 1))]
    assert np.array_equal(np.concatenate(audio)[: sure.size], sure)
    (speech,) = block.behaviors
    whole = msgspec.structs.replace(speech, text="Sure. The gate is down by the river.")
    assert realizer.extend_speech(opened.block_id, msgspec.structs.replace(block, behaviors=[whole])).accepted
    decision = await asyncio.wait_for(decider.decide(taken, taken), 10)
    assert decision.out.condition.audio == (0.0,) * manifest.frames_per_chunk  # not in the chunk deciding it
    rest = voice.synthesize("The gate is down by the river.").samples
    audio = []
    for m in range(taken, taken + ahead + 1 + rest.size // per_chunk):
        if m > taken:
            await decider.decide(m, m)
        audio += [player.slice(f) for f in range(media.first_frame(m), media.first_frame(m + 1))]
    later = np.concatenate(audio)
    assert not later[: ahead * per_chunk].any()  # silent until the rest's chunk
    assert np.array_equal(later[ahead * per_chunk :][: rest.size], rest)


class CountingVoice(Voice):
    """The real voice, noting each text it is asked to synthesise."""

    def __init__(self) -> None:
        super().__init__()
        self.made: list[str] = []

    async def synthesize_async(self, text: str, first: bool = False) -> Utterance:
        self.made.append(text)
        return await super().synthesize_async(text, first)


async def test_speech_is_synthesised_as_it_is_submitted_and_its_cue_plays_that_same_audio(
    voice: Voice,
) -> None:
    counting = CountingVoice()
    realizer = Realizer(manifest=SLOW, voice="server")
    player = SpeechPlayer(counting, realizer, config=SpeechConfig(first_clause=True))
    realizer.submit(Block(behaviors=[Speech(text=TEXT)]))
    await asyncio.sleep(0)
    assert counting.made == ["Hello there,"]  # before any chunk cued it
    (cue,) = realizer.tick(0).speech_start
    player.start(cue, 0)
    early = await player.envelope(0)
    # The cue took the part made ahead: every part was made once.
    async with asyncio.timeout(10):
        while len(counting.made) < 3:  # noqa: ASYNC110 (the player publishes no event for this)
            await asyncio.sleep(0.005)
    assert counting.made == speech_parts(Voice.sentences(TEXT), first_clause=True)
    # The same mouth as a voice synthesised only when cued: the frames do not change.
    late_realizer, late_cue = cued()
    late_player = SpeechPlayer(voice, late_realizer, config=SpeechConfig(first_clause=True))
    late_player.start(late_cue, 0)
    assert early is not None and early == await late_player.envelope(0)
    await player.close()
    await late_player.close()
