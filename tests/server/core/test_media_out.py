"""Media out, in virtual time: every frame of a chunk goes out at its presentation time with its slice
of the character's audio before it, the chunk's reflects on its first frame only, and what it shows of
the session (on-time share, frame rate) is counted as it goes."""

from __future__ import annotations

import asyncio
import sys
from collections import deque

import pytest

from agent.plans import Block, Speech
from agent.realizer import ChunkOutput, Realizer
from events.tracing import Tracer
from server.core.chunk import ReadyChunk
from server.core.media_out import MediaOut
from server.core.outputs import AudioOut, Output, VideoOut
from server.core.schedule import ChunkSchedule
from server.cpu_watch import CpuWatch
from server.media import MediaClock, pcm16
from server.speech import SpeechPlayer
from server.voice import OUTPUT_RATE, Voice
from streaming_model.condition import ChunkCondition
from streaming_model.manifest import build_manifest
from tests.support.clock import VirtualClock

MANIFEST = build_manifest(fps=16, frames_per_chunk=3, width=160, height=96)
MEDIA = MediaClock.of(MANIFEST)


def chunk(index: int, ready_at: float, reflects: tuple[str, ...] = ()) -> ReadyChunk:
    decision = ChunkOutput(chunk=index, condition=ChunkCondition("idle"))
    jpegs = [f"jpeg {index}.{i}".encode() for i in range(MEDIA.chunk_frames)]
    return ReadyChunk(index, index, jpegs, reflects, ready_at, decision, decision.condition, 0.0, 0.0)


async def test_frames_go_out_at_their_presentation_times_with_their_audio_first() -> None:
    clock = VirtualClock(50.0)
    schedule = ChunkSchedule(
        MEDIA, lead_chunks=1.0, redirect=True, redirect_margin=1.25, finish_times=deque(), clock=clock
    )
    schedule.begin(0.5)
    voice, realizer = Voice(), Realizer(manifest=MANIFEST, voice="server")
    realizer.submit(Block(behaviors=[Speech(text="Hello.")]))
    (cue,) = realizer.tick(0).speech_start
    player = SpeechPlayer(voice, realizer)
    player.start(cue, 0)
    for m in (0, 1):
        await player.envelope(m)  # as the decider does before a chunk: its voice is synthesised
    sent: list[tuple[float, Output]] = []
    all_sent = asyncio.Event()

    async def out(item: Output) -> None:
        sent.append((clock.time(), item))
        if len(sent) == 4 * MEDIA.chunk_frames:
            all_sent.set()

    media = MediaOut("s", schedule, player, (MANIFEST.width, MANIFEST.height), Tracer(), out)
    task = asyncio.create_task(media.run())
    media.ready.put_nowait(chunk(0, ready_at=schedule.send_at(0), reflects=("e1",)))
    media.ready.put_nowait(chunk(1, ready_at=schedule.send_at(1) + 0.2))  # this one came late
    await asyncio.wait_for(all_sent.wait(), 10)
    task.cancel()

    assert [type(item) for _, item in sent] == [AudioOut, VideoOut] * (2 * MEDIA.chunk_frames)
    video = [(t, item) for t, item in sent if isinstance(item, VideoOut)]
    for n, (t, frame) in enumerate(video):
        assert (frame.chunk, frame.frame) == divmod(n, MEDIA.chunk_frames)
        assert t == pytest.approx(schedule.frame_at(n))  # sent when due, not before
        assert frame.sent_ms == pytest.approx(1000 * (t - 50.0))  # since the session's media was made
        assert frame.pts_ms == MEDIA.pts_ms(n)
        assert frame.jpeg == f"jpeg {frame.chunk}.{frame.frame}".encode()
        assert frame.reflects == (("e1",) if n == 0 else ())
        assert (frame.width, frame.height) == (160, 96)
    audio = [item for _, item in sent if isinstance(item, AudioOut)]
    assert {a.samples for a in audio} == {OUTPUT_RATE // MEDIA.fps}
    assert [a.pts_ms for a in audio] == [f.pts_ms for _, f in video]
    # The voice, slice by slice in frame order: the utterance's first samples as PCM16.
    said = voice.synthesize(cue.text).samples[: len(audio) * OUTPUT_RATE // MEDIA.fps]
    assert b"".join(a.pcm for a in audio)[: 2 * said.size] == pcm16(said)
    assert (media.chunks_sent, media.chunks_on_time) == (2, 1)
    assert media.last_frame == 2 * MEDIA.chunk_frames - 1
    assert media.figures().fps == 2 * MEDIA.chunk_frames  # all sent within the last virtual second


class Watching:
    """An observer that keeps nothing but says where the CPU went, as the server's metrics do."""

    def __init__(self, watch: CpuWatch) -> None:
        self.cpu_note = watch.note

    def reaction(self, kind: str, seconds: float) -> None: ...

    def chunk(self, seconds: float, on_time: bool) -> None: ...

    def voice_to_voice(self, seconds: float) -> None: ...

    def lip_sync(self, offset_s: float) -> None: ...


@pytest.mark.skipif(sys.platform != "linux", reason="the CPU note reads /proc")
async def test_a_late_chunks_warning_says_where_the_cpu_went(caplog: pytest.LogCaptureFixture) -> None:
    clock = VirtualClock(50.0)
    schedule = ChunkSchedule(
        MEDIA, lead_chunks=1.0, redirect=True, redirect_margin=1.25, finish_times=deque(), clock=clock
    )
    schedule.begin(0.5)
    watch = CpuWatch(every_s=0.05)
    watch.start()
    await asyncio.sleep(0.1)  # a reading to measure from
    sent: list[Output] = []
    chunk_out = asyncio.Event()

    async def out(item: Output) -> None:
        sent.append(item)
        if len(sent) == 2 * MEDIA.chunk_frames:
            chunk_out.set()

    player = SpeechPlayer(Voice(), Realizer(manifest=MANIFEST))
    media = MediaOut("s", schedule, player, (MANIFEST.width, MANIFEST.height), Tracer(), out)
    media.observer = Watching(watch)
    task = asyncio.create_task(media.run())
    media.ready.put_nowait(chunk(0, ready_at=schedule.send_at(0) + 0.2))
    await asyncio.wait_for(chunk_out.wait(), 10)
    task.cancel()
    await watch.stop()
    (late,) = [r.getMessage() for r in caplog.records if " late;" in r.getMessage()]
    assert late.startswith("session s: chunk 0 ready 200 ms late;")
    assert "; CPU over the last " in late and "in cores: " in late and "machine busy" in late
