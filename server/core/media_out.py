"""Media out: each chunk's frames sent at their presentation times, every frame with its slice of the
character's audio, and what that shows of the session (frame rate, on-time share, reaction times, the
audio-to-mouth offset, voice-to-voice latency); before a chunk whose scene changes, the scene it shows. It
traces the first frame reflecting each input (``SENT``) and the first audible sample of the speech answering
one (``AUDIO_SENT``). A chunk's frames are read as they are sent, so a splice (``splice``) can replace those
of the chunk playing that are not out yet."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable

import numpy as np

from events.tracing import AUDIO_SENT, SENT, SPEECH_END, Tracer
from server.core.chunk import ReadyChunk, ordered
from server.core.lipsync import LipSync
from server.core.outputs import AudioOut, Figures, Observer, Output, SceneChanged, VideoOut
from server.core.schedule import ChunkSchedule
from server.media import pcm16
from server.speech import SpeechPlayer
from server.voice import loudness
from streaming_model.condition import ChunkCondition

log = logging.getLogger(__name__)


class MediaOut:
    """Sends the chunks put on ``ready`` through ``out``, frame by frame on ``schedule``."""

    def __init__(
        self,
        session_id: str,
        schedule: ChunkSchedule,
        player: SpeechPlayer,
        size: tuple[int, int],
        tracer: Tracer,
        out: Callable[[Output], Awaitable[None]],
    ) -> None:
        self.session_id = session_id
        self.schedule = schedule
        self.player = player
        self.width, self.height = size
        self.tracer = tracer
        self._out = out
        self.ready: asyncio.Queue[ReadyChunk] = asyncio.Queue()
        self.last_frame = -1
        """The last frame sent (global number): speech stopped now stops sounding after it."""
        self.chunks_sent = 0
        self.chunks_on_time = 0
        self.reactions_ms: deque[float] = deque(maxlen=500)
        self._sent_times: deque[float] = deque(maxlen=240)
        self.lip_sync = LipSync(schedule.media.fps)
        self.observer: Observer | None = None
        self._made_at = schedule.clock.time()
        self._scene: dict[str, str] = {}
        """The scene of the last chunk sent (part -> choice; a part not named is at its default)."""
        self._retell = False
        self.handed: ReadyChunk | None = None
        """The chunk handed over last (``hand``): playing, or waiting for its first frame's time."""

    def hand(self, chunk: ReadyChunk) -> None:
        """Send ``chunk`` after the chunks handed before it."""
        self.handed = chunk
        self.ready.put_nowait(chunk)

    def unsent(self, chunk: ReadyChunk) -> int | None:
        """The first frame of ``chunk`` (the one handed over last) not yet sent: 0 while it waits for its
        turn; None once all of its frames are out."""
        first = self.schedule.media.first_frame(chunk.index)
        frame = max(0, self.last_frame + 1 - first)
        return frame if frame < len(chunk.jpegs) else None

    def splice(
        self, chunk: ReadyChunk, jpegs: list[bytes], condition: ChunkCondition, reflects: tuple[str, ...]
    ) -> int | None:
        """Send ``jpegs`` (``chunk``, handed over, made again under ``condition``) instead of its frames not
        yet sent, the first of them reflecting ``reflects``: that frame, or None (nothing changed) once every
        frame of it is out."""
        frame = self.unsent(chunk)
        if frame is None:
            return None
        # In place: the sender reads each frame of the chunk as it sends it.
        chunk.jpegs = chunk.jpegs[:frame] + jpegs[frame:]
        chunk.condition = condition
        chunk.spliced[frame] = ordered(set(chunk.spliced.get(frame, ())) | set(reflects))
        return frame

    def retell(self) -> None:
        """A new connection: before the next frame sent, tell the scene it shows if it names any part (the
        client knows only the defaults)."""
        self._retell = True

    async def run(self) -> None:
        """Send chunks as they become ready, forever."""
        while True:
            chunk = await self.ready.get()
            self._count(chunk)
            media = self.schedule.media
            for i in range(len(chunk.jpegs)):
                frame = media.first_frame(chunk.index) + i
                await self.schedule.clock.sleep_until(self.schedule.frame_at(frame))
                self.last_frame = frame
                jpeg = chunk.jpegs[i]  # read now: a splice may have replaced the frames not yet sent
                pts = media.pts_ms(frame)
                await self._tell_scene(chunk, i == 0)
                cause = self.player.cause  # before the slice: the last one ends the speech
                audio = self.player.slice(frame)
                await self._out(AudioOut(pts_ms=pts, pcm=pcm16(audio), samples=audio.size))
                self._lip_sync(chunk.condition.voice[i], audio)
                reflects = chunk.reflects_at(i)
                video = VideoOut(
                    chunk=chunk.index,
                    frame=i,
                    pts_ms=pts,
                    width=self.width,
                    height=self.height,
                    reflects=reflects,
                    gen_chunk=chunk.gen_chunk,
                    sent_ms=1000.0 * (self.schedule.clock.time() - self._made_at),
                    jpeg=jpeg,
                )
                await self._out(video)
                self._sent_times.append(self.schedule.now())
                # The frame's reactions first: a turn's trace ends with its first audible sample, and a voice
                # that starts with the chunk reacting to the turn sounds in that chunk's first frame.
                self._trace(reflects)
                if cause is not None and audio.any() and self.tracer.record(cause, AUDIO_SENT):
                    self._voice_to_voice(cause)

    async def _tell_scene(self, chunk: ReadyChunk, first: bool) -> None:
        """``SceneChanged`` before a chunk's first frame when its scene differs from the last chunk's (a
        story rewind to an earlier scene too), or before any frame after ``retell`` when it names a part."""
        scene = dict(chunk.condition.scene)
        tell = (first and scene != self._scene) or (self._retell and bool(scene))
        self._scene, self._retell = scene, False
        if tell:
            media = self.schedule.media
            pts = media.pts_ms(media.first_frame(chunk.index))
            await self._out(SceneChanged(chunk=chunk.index, pts_ms=pts, scene=tuple(scene.items())))

    def _count(self, chunk: ReadyChunk) -> None:
        self.chunks_sent += 1
        on_time = self.schedule.on_time(chunk.index, chunk.ready_at)
        if self.observer is not None:
            self.observer.chunk(chunk.ready_at - chunk.decided_at, on_time)
        if on_time:
            self.chunks_on_time += 1
            return
        send_at = self.schedule.send_at(chunk.index)
        log.warning(
            "session %s: chunk %d ready %.0f ms late; its slot began %.0f ms before the send, the "
            "decision took %.0f ms, generating %.0f ms%s%s",
            self.session_id,
            chunk.index,
            1000 * (chunk.ready_at - send_at),
            1000 * (send_at - chunk.begun_at),
            1000 * (chunk.decided_at - chunk.begun_at),
            1000 * (chunk.ready_at - chunk.decided_at),
            " (replaced)" if chunk.replaced else "",
            f"; CPU {note}" if self.observer is not None and (note := self.observer.cpu_note()) else "",
        )

    def _trace(self, reflects: tuple[str, ...]) -> None:
        """The reflecting frame went out: the end of each reflected input's reaction."""
        now_ns = time.monotonic_ns()
        for event_id in reflects:
            self.tracer.record(event_id, SENT, now_ns)
            latency = self.tracer.latency_ms(event_id, SENT)
            if latency is not None:
                self.reactions_ms.append(latency)
                if self.observer is not None:
                    self.observer.reaction(self.tracer.kind(event_id) or "unknown", latency / 1000)

    def _voice_to_voice(self, cause: str) -> None:
        """The first audible sample answering ``cause`` went out: the end of its turn, if it was spoken."""
        latency = self.tracer.latency_ms(cause, AUDIO_SENT, SPEECH_END)
        if latency is not None and self.observer is not None:
            self.observer.voice_to_voice(latency / 1000)

    def _lip_sync(self, mouth: float, audio: np.ndarray) -> None:
        offset = self.lip_sync.add(mouth, float(loudness(audio)))
        if offset is not None and self.observer is not None:
            self.observer.lip_sync(offset)

    def figures(self) -> Figures:
        """Frame rate over the last second, on-time share, reaction times, chunks waiting to be sent."""
        now = self.schedule.now()
        fps = sum(1 for t in self._sent_times if now - t <= 1.0)
        reactions = np.asarray(self.reactions_ms) if self.reactions_ms else None
        return Figures(
            fps=float(fps),
            on_time=self.chunks_on_time / self.chunks_sent if self.chunks_sent else 1.0,
            reaction_ms_p50=None if reactions is None else round(float(np.percentile(reactions, 50)), 1),
            reaction_ms_p95=None if reactions is None else round(float(np.percentile(reactions, 95)), 1),
            queue=self.ready.qsize(),
        )
