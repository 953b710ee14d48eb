"""Each chunk's life until it is handed to the sender: generated under the decider's decision, redirected
while in flight, replaced while generated and not yet sent.

Redirect: while chunk k is being generated, an urgent event (speech, a sound, a gesture, an interrupt;
with ``SpeechConfig.redirects``, the Director's speech once its first audio is ready) wakes the maker.
It waits for the reactive minds (reflexes, script triggers) to answer the event (``EventBus.settle``),
and if the deadline still allows a full regeneration, the realizer proposes a new decision for chunk k.
When the condition is unchanged the proposal is committed and the chunk in flight stands for it (its
``reflects`` name the event); when it changed, the generation in flight is cancelled (it stops within one
denoise step) and started again with the new condition. Otherwise the event lands in chunk k+1. Nothing
is committed to the generator's cache until a chunk is final, so a redirect never disturbs the past.

Replace: a chunk that is generated but not yet sent is held by the generation loop until it is handed to
the sender. An urgent event in that time, while the deadline still allows a regeneration, has the
realizer re-decide it; when the condition changed, the generator generates that chunk again (its frames
went out of the worker before its commit, which waits for the next chunk: a replacement is a plain
regeneration; with replacement off, the proposal is discarded and the event shows in the next chunk). A
replacement that would be late is abandoned: the chunk already generated goes out on time, and the
events of its decision are reflected by the next chunk. Only chunks nobody has seen are ever replaced.

Splice (a session whose client reads ``reflects`` on every frame, ``splices``): an urgent event that
comes while a chunk plays, and changes the decision of the chunk after it, shows from the first frame of
the playing chunk that a regeneration can still reach: the generator makes the playing chunk again under
the new decision (its voice and scene kept: its audio is already playing, and the scene changes between
chunks) and forgets the chunk after it; the sender takes the new frames from there on, and the chunk after
it is made again on the new one. So a reaction waits for the next frame a regeneration reaches, not for
the next chunk. It is tried only where the chunk after it can still be made for its send
(``ChunkSchedule.splice_from``); a splice still denoising when that stops being so is abandoned, and
every chunk stands. Another urgent event that changes the decision while a splice denoises is spliced
as soon as that splice is made, before the chunk after it is made again. A splice prepared on a hunch (an
onset's, a start of speech's) while it was being confirmed (``server.core.foresight``) is taken where the
re-decision asks for it, as a splice or a replacement.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import msgspec

from agent.handover import Handover
from agent.story.player import StoryPlayer
from events.bus import EventBus
from events.hunch import Hunch
from server.core.chunk import ReadyChunk, adopt, ordered
from server.core.decider import Decider, Redecision
from server.core.foresight import Foresight
from server.core.media_out import MediaOut
from server.core.schedule import ChunkSchedule
from server.core.urgent import Urgent, UrgentInputs, VoiceReady
from server.media import encode_frames
from streaming_model.condition import ChunkCondition
from streaming_model.worker import Cancel, GeneratorWorker

SETTLE_TIMEOUT_S = 0.05
"""A re-decision waits this long at most for the reactive minds to answer an event: they answer in the
same step that takes it, so only a stalled event loop can make it wait; then the event shows a chunk later."""


class ChunkMaker:
    """Makes a session's chunks on ``schedule`` with ``worker``: ``make`` generates one, ``replace_until``
    holds a generated one until it is handed to the sender. ``story`` gives the session's story, whose state
    goes with each chunk where another front end could take the session over (``handover``)."""

    def __init__(
        self,
        worker: GeneratorWorker,
        schedule: ChunkSchedule,
        decider: Decider,
        urgent: UrgentInputs,
        bus: EventBus,
        media: MediaOut,
        *,
        handover: Handover | None,
        story: Callable[[], StoryPlayer | None],
        jpeg_quality: int,
        replaces: bool,
        redirect: bool,
    ) -> None:
        self.worker = worker
        self.schedule = schedule
        self.decider = decider
        self.urgent = urgent
        self.bus = bus
        self.media = media
        self._handover = handover
        self._story = story
        self._encode = functools.partial(encode_frames, quality=jpeg_quality)
        """Finishes a chunk where it was made (after its decode): its frames as JPEG images."""
        self.replaces = replaces
        """Whether a generated chunk not yet sent is replaced (``ConductorConfig.replaces``)."""
        # Redirecting a chunk in flight needs a cancel that stops it mid-chunk; without one, an urgent event
        # waits for the chunk to finish and then replaces it (or shows in the next chunk).
        self.redirects_in_flight = redirect and worker.manifest.capabilities.interrupt in ("block", "step")
        self.splices = False
        """Whether a reaction may show in the unsent frames of the chunk playing (the session's client reads
        ``reflects`` on every frame, and chunks are replaced)."""
        self.redirects = 0
        self.replaced = 0  # generated chunks regenerated before they were sent
        self.spliced = 0  # chunks made again while they played
        self._carry: set[str] = set()
        """Events a re-decision committed whose replacement came too late: the next chunk reflects them."""
        self._missed: set[str] = set()
        """Events that came too late to re-decide the chunk they woke: the next decision reflects them."""
        self.foresight = Foresight(worker, schedule, decider, media, self._encode)

    async def replace_until(self, chunk: ReadyChunk, hand_at: float) -> ReadyChunk:
        """Hold a generated chunk until ``hand_at``; an urgent event that changes its decision while a
        regeneration still fits before its send time replaces it (the generator rolls back one chunk)."""
        while (event := await self.urgent.until(hand_at)) is not None:
            if isinstance(event, Hunch):
                if self.splices:
                    self.foresight.hunch(event, chunk, hand_at)
                continue
            redo = await self._redecide(event, chunk, regenerate=self.replaces)
            if redo is None:
                continue
            if redo.out is None:
                chunk = adopt(chunk, redo.decision)
                continue
            redo, shown = await self._splice(chunk, redo)
            if shown is not None:
                chunk = await self._remake(chunk, redo, shown)
                continue
            chunk, done = await self._replace(chunk, redo)
            if not done:
                break
        return chunk

    async def _replace(self, chunk: ReadyChunk, redo: Redecision) -> tuple[ReadyChunk, bool]:
        """Regenerate a generated, unsent chunk under ``redo`` if that is still ready in time: (the chunk to
        send, whether it was replaced). If not, the old chunk stays and the answer shows in the next one."""
        assert redo.out is not None
        deadline = self.schedule.replace_deadline(chunk.index)
        new = await self._regenerate(chunk, redo, deadline) if self.replaces else None
        if new is None:
            self._carry |= set(redo.decision.reflects)
            return chunk, False
        self.replaced += 1
        return new, True

    async def _regenerate(self, chunk: ReadyChunk, redo: Redecision, deadline: float) -> ReadyChunk | None:
        """Generate an unsent chunk again under ``out``; None (and the old chunk kept) when the new one would
        not be ready by ``deadline``."""
        schedule = self.schedule
        cancel = Cancel()
        timer = schedule.clock.call_at(deadline, cancel.set)
        started = schedule.now()
        assert redo.out is not None
        try:
            await self._keep_minds()
            jpegs = await self.foresight.take(chunk.index, chunk.gen_chunk, redo.out.condition)
            if jpegs is not None:  # made ahead, on a hunch
                return self._made_again(chunk, redo, jpegs, ())
            jpegs = await self.worker.replace(redo.out.condition, cancel, self._encode)
        finally:
            timer.cancel()
        if jpegs is None:
            return None
        schedule.chunk_times.append(schedule.now() - started)
        return self._made_again(chunk, redo, jpegs, ())

    def _made_again(
        self, chunk: ReadyChunk, redo: Redecision, jpegs: list[bytes], shown: tuple[str, ...]
    ) -> ReadyChunk:
        """``chunk`` generated again under ``redo`` as ``jpegs``: it reflects its own events and the
        re-decision's, but for those a splice already ``shown``."""
        assert redo.out is not None
        reflects = (set(chunk.reflects) | set(redo.decision.reflects)) - set(shown)
        return ReadyChunk(
            chunk.index,
            chunk.gen_chunk,
            jpegs,
            ordered(reflects),
            self.schedule.now(),
            redo.decision,
            redo.out.condition,
            chunk.begun_at,
            chunk.decided_at,
            replaced=True,
        )

    async def _splice(self, chunk: ReadyChunk, redo: Redecision) -> tuple[Redecision, tuple[str, ...] | None]:
        """Show ``redo`` (the new decision of ``chunk``) in the chunk playing before it, from its first
        frame that a regeneration still reaches. Returns the decision it ends with and the events shown
        (empty when the frames came too late to show), after which the generator has forgotten ``chunk``,
        to be made again on the new decision; the events are None where no splice was made (none fitted, or
        it was abandoned: nothing changed). An urgent event while a splice denoises re-decides ``chunk`` as
        in ``make``: one that changes the condition is spliced as soon as this splice is made, again from
        the first frame not yet sent (the second input of a burst, such as a sound's name just after its
        onset, would otherwise wait for the remake after this splice too); the decision returned reflects
        the events of all of them."""
        playing = self.media.handed
        if not self.splices or playing is None or redo.out is None:
            return redo, None
        if (playing.index, playing.gen_chunk) != (chunk.index - 1, chunk.gen_chunk - 1):
            return redo, None  # not the chunk just before (a story rewind came between them)
        frames = len(playing.jpegs)
        reflects = set(redo.decision.reflects)
        shown: tuple[str, ...] | None = None  # once a splice's frames went to the sender
        while True:
            unsent = self.media.unsent(playing)
            made_in = self.foresight.made_in(playing.index)  # made ahead: no time, or what is left of it
            if unsent is None or self.schedule.splice_from(playing.index, unsent, frames, made_in) is None:
                return redo, shown
            was = playing.condition
            condition = msgspec.structs.replace(
                redo.out.condition, speaking=was.speaking, audio=was.audio, scene=was.scene
            )
            pending = dataclasses.replace(chunk, decision=redo.decision, condition=redo.out.condition)
            newer = None
            jpegs = await self.foresight.take(playing.index, playing.gen_chunk, condition)
            if jpegs is None:
                jpegs, newer = await self._splice_now(playing, condition, pending, reflects)
            if jpegs is not None:
                self.spliced += 1
                showing = ordered(reflects - set(shown or ()))  # a splice before showed the rest
                went = self.media.splice(playing, jpegs, condition, showing) is not None
                shown = ordered(set(shown or ()) | set(showing if went else ()))
            # A re-decision that kept the condition joined this one (``_watch`` added its events).
            latest = pending.decision if newer is None else newer.decision
            reflects |= set(latest.reflects)
            out = redo.out if newer is None else newer.out
            redo = Redecision(msgspec.structs.replace(latest, reflects=ordered(reflects)), out)
            if newer is None or jpegs is None:
                return redo, shown

    async def _splice_now(
        self, playing: ReadyChunk, condition: ChunkCondition, pending: ReadyChunk, reflects: set[str]
    ) -> tuple[list[bytes] | None, Redecision | None]:
        """Make ``playing`` again under ``condition``, abandoned at its deadline (None frames), while urgent
        events re-decide ``pending``, the chunk after it: (the frames, a newer decision that changes it)."""
        frames = len(playing.jpegs)
        cancel = Cancel()
        deadline = self.schedule.splice_deadline(playing.index, frames)
        timer = self.schedule.clock.call_at(deadline, cancel.set)
        try:
            job = asyncio.ensure_future(
                self.worker.splice(playing.gen_chunk, condition, cancel, self._encode)
            )
            newer = await self._watch(job, pending, reflects)
            # Not cancelled for a newer decision: a splice cancelled has restored the generator's state,
            # which cannot be rolled back again; one finished is spliced again at once.
            return await job, newer
        finally:
            timer.cancel()

    async def _remake(self, chunk: ReadyChunk, redo: Redecision, shown: tuple[str, ...]) -> ReadyChunk:
        """``chunk`` made again under ``redo`` after a splice into the chunk before it (the generator forgot
        it): however long that takes, since it has to be sent."""
        assert redo.out is not None
        started = self.schedule.now()
        await self._keep_minds()
        jpegs = await self.worker.produce(redo.out.condition, Cancel(), self._encode)
        assert jpegs is not None  # never cancelled
        self.schedule.produce_times.append(self.schedule.now() - started)
        self.schedule.chunk_times.append(self.schedule.now() - started - self._last_commit_s())
        return self._made_again(chunk, redo, jpegs, shown)

    async def make(self, k: int, m: int) -> ReadyChunk:
        """Generate chunk k (media chunk m) under the decider's decision, redirecting it while in flight
        when urgent events allow."""
        schedule = self.schedule
        begun = schedule.now()
        # What arrived since the last chunk (or too late for it) is already in this decision.
        arrived = self.urgent.drain() | self._missed
        self._missed = set()
        with schedule.deciding(m) as overdue:
            decided = await self.decider.decide(k, m, overdue)
        # The chunk as it will be if nothing redirects it; a redirect or an adopted decision updates it.
        chunk = ReadyChunk(m, k, [], (), 0.0, decided.decision, decided.out.condition, begun, schedule.now())
        carried, self._carry = self._carry, set()
        reflects = set(decided.decision.reflects) | carried
        shown: set[str] = set()  # events a splice showed in the chunk before
        if (arrived | carried) & reflects:  # each came too late to change the chunk before: splice it there
            now, spliced = await self._splice(chunk, Redecision(decided.decision, decided.out))
            assert now.out is not None
            chunk.decision, chunk.condition = now.decision, now.out.condition
            reflects |= set(now.decision.reflects)
            shown |= set(spliced or ())
        started = schedule.now()
        committing = 0.0  # the commit of the chunk before, which a regeneration of this one does not repeat
        late: Redecision | None = None  # a new decision that came after the denoising had finished
        while True:
            cancel = Cancel()
            producing = schedule.now()
            await self._keep_minds()
            job = asyncio.ensure_future(self.worker.produce(chunk.condition, cancel, self._encode))
            redo = await self._watch(job, chunk, reflects)
            if redo is None:
                jpegs = job.result()
                schedule.produce_times.append(schedule.now() - producing)
                committing += self._last_commit_s()
                break
            cancel.set()
            jpegs = await job
            committing += self._last_commit_s()
            redo, spliced = await self._splice(chunk, redo)
            assert redo.out is not None
            if spliced is not None:  # shown in the chunk playing; this one is made again on it
                chunk.decision, chunk.condition = redo.decision, redo.out.condition
                reflects |= set(redo.decision.reflects)
                shown |= set(spliced)
                continue
            if jpegs is not None:
                # It finished before it saw the flag (the flag is read between denoising steps, and decoding
                # takes about half the chunk time): the chunk is generated, so it may still be replaced.
                late = redo
                break
            chunk.decision, chunk.condition = redo.decision, redo.out.condition
            reflects |= set(redo.decision.reflects)
            self.redirects += 1
        assert jpegs is not None
        schedule.chunk_times.append(schedule.now() - started - committing)
        chunk.jpegs, chunk.ready_at = jpegs, schedule.now()
        schedule.made_times.append(chunk.ready_at - chunk.decided_at)
        chunk.reflects = ordered(reflects - shown)
        if late is not None:
            chunk, _ = await self._replace(chunk, late)
        return chunk

    async def _keep_minds(self) -> None:
        """Where another front end could take the session over: the minds as they are after deciding the
        chunk about to be made go with it (``agent.handover``)."""
        if self._handover is not None:
            notes = await self._handover.notes(story=self._story())
            self.worker.keep(notes)

    def _last_commit_s(self) -> float:
        """Seconds the produce that just returned spent committing the chunk before its own."""
        times = self.worker.commit_times
        return times[-1] if times else 0.0

    async def _watch(
        self, job: asyncio.Future[list[bytes] | None], chunk: ReadyChunk, reflects: set[str]
    ) -> Redecision | None:
        """Wait for ``job`` (generating ``chunk``); on an urgent event, re-decide it while the deadline
        allows a redo.

        Returns a new decision to generate (the caller cancels and regenerates), or None once ``job`` has
        finished. A re-decision that leaves the condition as it is becomes the chunk's (its events join
        ``reflects``) and the generation goes on.
        """
        if not self.redirects_in_flight:
            await asyncio.wait({job})  # urgent events wait, queued, for the replacement or the next chunk
            return None
        while True:
            waiter = asyncio.ensure_future(self.urgent.get())
            try:
                both: set[asyncio.Future[Any]] = {job, waiter}
                done, _ = await asyncio.wait(both, return_when=asyncio.FIRST_COMPLETED)
            finally:
                if not waiter.done():
                    waiter.cancel()
                    # wait() rather than awaiting the waiter: its CancelledError must not swallow ours.
                    await asyncio.wait({waiter})
            if waiter not in done:
                return None
            redo = await self._redecide(waiter.result(), chunk, regenerate=True)
            if redo is not None and redo.out is None:
                chunk.decision = redo.decision
                reflects |= set(redo.decision.reflects)
            elif redo is not None:
                return redo

    def _time_to_redo(self, chunk: ReadyChunk) -> bool:
        """Whether a regeneration of ``chunk`` still fits before its send, or it was made again ahead."""
        return self.schedule.time_to_redo(chunk.index) or self.foresight.ready(chunk.index)

    async def _redecide(self, event: Urgent, chunk: ReadyChunk, *, regenerate: bool) -> Redecision | None:
        """After an urgent input: once the reactive minds have answered it, re-decide ``chunk`` if a
        regeneration still fits before its send (None, and the event lands in the next chunk, if not)."""
        self.urgent.take(event)
        if self._time_to_redo(chunk):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.bus.settle(), SETTLE_TIMEOUT_S)
        if not self._time_to_redo(chunk):
            if not isinstance(event, VoiceReady):
                self._missed.add(event.id)
            return None
        with self.schedule.deciding(chunk.index) as late:
            return await self.decider.redecide(
                chunk.gen_chunk,
                chunk.index,
                chunk.decision,
                chunk.condition,
                regenerate=regenerate,
                late=late,
            )
