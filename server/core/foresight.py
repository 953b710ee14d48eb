"""A reaction prepared on a hunch, while its input is still being confirmed.

An onset is confirmed 55-65 ms after it is heard (``events.onset``), the start of speech 64 ms or more
(``events.vad``); a splice then takes a regeneration (20-40 ms where the generator computes in bf16, ~60 on
an AVX2-only EPYC) before it shows. The ears tell each candidate at once as a ``Hunch`` (``events.hunch``):
while a chunk waits for its send, the chunk maker asks the minds what the reflexes would make of such an
input (``Decider.foresee``, nothing kept) and, where that changes the condition, has the generator make
again, ahead and with nothing changed (``GeneratorWorker.foresee``), the chunk the confirmation will find:
the one playing now where a splice of it can still show once the input is confirmed and the splice made,
and the chunk waiting is not handed to the sender before that (a splice), else the chunk waiting (a
replacement, or a splice once it is handed on). When the input is confirmed and its re-decision asks for
that chunk under that very condition, the chunk maker takes the frames made ahead (``take``: the
generator adopts them), and the reaction waits only for the next frame; where they are still being made,
it splices from the frame they will be ready for (``made_in``). A hunch dropped, or that chunk asked for
under another condition, forgets it. Frames shown are the same either way: what is made ahead is what the
confirmation would have made.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

import msgspec
import numpy as np

from events.hunch import Hunch, HunchKind
from events.vocabulary import Event, SoundOnset, SpeechStarted
from server.core.chunk import ReadyChunk
from server.core.decider import Decider
from server.core.media_out import MediaOut
from server.core.schedule import ChunkSchedule
from streaming_model.condition import ChunkCondition
from streaming_model.producer import Ahead
from streaming_model.worker import Cancel, GeneratorWorker

log = logging.getLogger(__name__)

MICROPHONE_FRAME_S = 0.02
"""How much later than its soonest an input may be confirmed: it is heard with the microphone frame that
completes it (20 ms frames from the browser page and the voice pipelines)."""

HUNCH_ID = "hunch"
"""The id of the input a foresight imagines: no real event's (nothing it submits is kept)."""


@dataclass
class Foreseen:
    """Media chunk ``index`` (generator chunk ``gen_chunk``) being made again ahead under ``condition``, for
    the hunch of ``kind`` at ``at_ms``."""

    index: int
    gen_chunk: int
    condition: ChunkCondition
    kind: HunchKind
    at_ms: float
    job: asyncio.Future[tuple[list[bytes], Ahead] | None]
    cancel: Cancel
    started_at: float
    """When its making began (the session's clock)."""


class Foresight:
    """One session's splices prepared on hunches, one at a time; ``started``, ``used`` (adopted) and
    ``dropped`` (forgotten) count them."""

    def __init__(
        self,
        worker: GeneratorWorker,
        schedule: ChunkSchedule,
        decider: Decider,
        media: MediaOut,
        encode: Callable[[np.ndarray], list[bytes]],
    ) -> None:
        self.worker = worker
        self.schedule = schedule
        self.decider = decider
        self.media = media
        self._encode = encode
        self.on = True
        """Whether hunches are acted on (``ConductorConfig.foresee``)."""
        self.pending: Foreseen | None = None
        self.started = 0
        self.used = 0
        self.dropped = 0

    def hunch(self, hunch: Hunch, chunk: ReadyChunk, hand_at: float) -> None:
        """Act on ``hunch`` while ``chunk`` (decided, generated) waits to be handed to the sender at
        ``hand_at``: a dropped one forgets what was made for it; a new one has the chunk its confirmation
        will find made again ahead, where the reflexes' answer changes ``chunk``'s condition."""
        if hunch.dropped:
            if self.pending is not None and (self.pending.kind, self.pending.at_ms) == (
                hunch.kind,
                hunch.audio_ms,
            ):
                self.forget()
            return
        if not self.on:
            return
        target = self._target(chunk, hand_at, hunch.confirm_ms / 1000.0)
        foreseen = self.decider.foresee(chunk.gen_chunk, chunk.decision, imagined(hunch))
        if foreseen is None:
            return
        was = target.condition
        condition = msgspec.structs.replace(foreseen, speaking=was.speaking, audio=was.audio, scene=was.scene)
        self.forget()
        cancel = Cancel()
        job = asyncio.ensure_future(self.worker.foresee(target.gen_chunk, condition, cancel, self._encode))
        job.add_done_callback(_failed)
        self.pending = Foreseen(
            target.index,
            target.gen_chunk,
            condition,
            hunch.kind,
            hunch.audio_ms,
            job,
            cancel,
            self.schedule.now(),
        )
        self.started += 1

    def _target(self, chunk: ReadyChunk, hand_at: float, confirm_s: float) -> ReadyChunk:
        """The chunk an input confirmed ``confirm_s`` (and up to a microphone frame) from now will be made
        again in: the one playing before ``chunk`` where a frame of it is still to go out then, a splice of
        it made from now on could still show when confirmed on time (``ChunkSchedule.splice_from``: the
        chunk after it made again in time), and ``chunk`` is not handed to the sender before the
        confirmation (a splice goes into the chunk handed last); else ``chunk`` (a replacement; or, once
        handed on, a splice under the decision after it, which is the one made here where the character's
        idle motion has not moved on)."""
        confirmed = self.schedule.now() + confirm_s + MICROPHONE_FRAME_S
        playing = self.media.handed
        if hand_at <= confirmed:
            return chunk
        if playing is None or (playing.index, playing.gen_chunk) != (chunk.index - 1, chunk.gen_chunk - 1):
            return chunk
        last = self.schedule.media.first_frame(playing.index) + len(playing.jpegs) - 1
        soonest = max(confirm_s, self.schedule.typical())  # confirmed on time, or made, whichever is later
        fits = self.schedule.splice_from(playing.index, 0, len(playing.jpegs), soonest) is not None
        return playing if fits and self.schedule.frame_at(last) > confirmed else chunk

    def ready(self, index: int) -> bool:
        """Whether media chunk ``index`` has been made again ahead (a splice of it needs no more time)."""
        return self.pending is not None and self.pending.index == index and self.pending.job.done()

    def made_in(self, index: int) -> float | None:
        """Seconds until media chunk ``index`` is made again ahead, as a typical making goes: 0 where it is,
        None where it is not being made ahead (a splice of it then takes a whole making)."""
        foreseen = self.pending
        if foreseen is None or foreseen.index != index:
            return None
        if foreseen.job.done():
            return 0.0
        return max(0.0, self.schedule.typical() - (self.schedule.now() - foreseen.started_at))

    async def take(self, index: int, gen_chunk: int, condition: ChunkCondition) -> list[bytes] | None:
        """The frames of media chunk ``index`` (generator chunk ``gen_chunk``) made again ahead under
        ``condition``, the generator's splice of it adopted; None where none was (one for an earlier chunk,
        or for this one under another condition, is forgotten; one for a later chunk is kept)."""
        foreseen = self.pending
        if foreseen is None or foreseen.index > index:
            return None
        if (foreseen.index, foreseen.gen_chunk, foreseen.condition) != (index, gen_chunk, condition):
            self.forget()
            return None
        self.pending = None
        await asyncio.wait({foreseen.job})
        job = foreseen.job
        made = None if job.cancelled() or job.exception() is not None else job.result()
        if made is None or not await self.worker.adopt(made[1]):
            self.dropped += 1
            return None
        self.used += 1
        return made[0]

    def forget(self) -> None:
        """Forget the pending splice, if any (cancelled while it denoises)."""
        foreseen, self.pending = self.pending, None
        if foreseen is not None:
            foreseen.cancel.set()
            self.dropped += 1


def imagined(hunch: Hunch) -> Event:
    """The event ``hunch`` expects, as the reflexes would get it (``HUNCH_ID``)."""
    if hunch.kind == "speech.started":
        return SpeechStarted(id=HUNCH_ID, session="", t_ns=0, audio_ms=hunch.audio_ms)
    return SoundOnset(id=HUNCH_ID, session="", t_ns=0, audio_ms=hunch.audio_ms, strength_db=hunch.strength_db)


def _failed(job: asyncio.Future[tuple[list[bytes], Ahead] | None]) -> None:
    """Log a splice made ahead that failed (it is then not taken: the confirmation splices as usual)."""
    if not job.cancelled() and (exc := job.exception()) is not None:
        log.warning("a splice made ahead failed: %r", exc)
