"""The session conductor: one live session end to end, on the media clock, free of any wire format.

    audio in -> ears -> bus -> minds (reflexes, script or Director -> realizer) -> generator -> media out

Timing (ARCHITECTURE.md, "The clock"): chunk k is sent at ``t0 + k*T`` (T, the chunk's length, and the
frame rate are the session's manifest's: 166.67 ms for the tiny model), frame by frame at the frames'
presentation times. Generation of chunk k starts ``lead`` chunks before that, so the generator
runs at most about one chunk ahead: every chunk generated early would be latency added to every reaction.

Redirect: while chunk k is being generated, an urgent event (speech, a sound, a gesture, an interrupt)
wakes the conductor. It waits for the reactive minds (reflexes, script triggers) to answer the event
(``EventBus.settle``), and if the deadline still allows a full regeneration, the realizer proposes a new
decision for chunk k. When the condition is unchanged the proposal is committed and the chunk in flight
stands for it (its ``reflects`` name the event); when it changed, the generation in flight is cancelled
(it stops within one denoise step) and started again with the new condition. Otherwise the event lands in
chunk k+1. Nothing is committed to the generator's cache until a chunk is final, so a redirect never
disturbs the past.

Replace: a chunk that is generated but not yet sent is held by the generation loop until it is handed to
the sender. An urgent event in that time, while the deadline still allows a regeneration, has the
realizer re-decide it; when the condition changed, the generator generates that chunk again (its frames
went out of the worker before its commit, which waits for the next chunk: a replacement is a plain
regeneration; with replacement off, the proposal is discarded and the event shows in the next chunk). A
replacement that would be late is abandoned: the chunk already generated goes out on time, and the
events of its decision are reflected by the next chunk. Only chunks nobody has seen are ever replaced.

Its parts: ``schedule`` (when), ``decider`` (what), ``media_out`` (sending); here, each chunk's life
(generate, redirect, replace) and the session's (inputs, story moves between chunks, start and close).
A transport feeds it inputs and takes its outputs (``server.core.outputs``) through a ``Sink``.

Outcomes: every input event gets one (``notices``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import msgspec

from agent.handover import Handover, Resumed
from agent.minds import Minds
from agent.script import ScriptError, load_script, script_from_builtins
from agent.story.format import StoryError
from agent.story.player import StoryPlayer
from agent.story.state import StoryView
from events.bus import EventBus, Subscription
from events.ears import EarsService
from events.stamp import Stamper
from events.vocabulary import (
    Event,
    Gesture,
    Interrupt,
    SoundClass,
    SoundOnset,
    SpeechStarted,
    SpeechStopped,
    TextInput,
)
from server.core.away import Away
from server.core.chunk import ReadyChunk, adopt, ordered
from server.core.decider import Decider, Redecision
from server.core.media_out import MediaOut
from server.core.notices import Notices
from server.core.outputs import Figures, Output, Sink, StoryMoved
from server.core.schedule import ChunkSchedule, Clock, lead_for
from server.media import MediaClock, encode_frames
from server.speech import SpeechPlayer
from streaming_model.backend import BackendManifest
from streaming_model.pool import TakenOver
from streaming_model.runtime import SessionSnapshot
from streaming_model.worker import Cancel, GeneratorWorker, WorkerMoved

log = logging.getLogger(__name__)

SETTLE_TIMEOUT_S = 0.05
"""A re-decision waits this long at most for the reactive minds to answer an event: they answer in the
same step that takes it, so only a stalled event loop can make it wait; then the event shows a chunk later."""

URGENT = (SpeechStarted, SpeechStopped, SoundOnset, SoundClass, Gesture, Interrupt, TextInput)
"""Events that may redirect the chunk in flight (the reflexes answer them)."""


class Refused(ValueError):
    """An input the session cannot take, with a message for the client."""


class ConductorConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Timing and quality knobs of one session."""

    lead_chunks: float | None = None
    """Generation of chunk k starts this many chunks before its send time; None: from what the backend
    declares (``schedule.lead_for``)."""
    start_delay_s: float = 0.3
    """The first chunk is sent this long after the session starts (model warm-up, first generation)."""
    redirect: bool = True
    replace: bool = True
    """Regenerate a generated chunk not yet sent when an urgent event changes its decision."""
    redirect_margin: float = 1.25
    """Regenerate (in flight, or a generated chunk not yet sent) only when the time left exceeds this many
    times the typical chunk time."""
    jpeg_quality: int = 85
    metrics_every_s: float = 1.0
    aligned: bool = False
    """Send chunks on a grid of whole chunks every aligned session of the process shares
    (``ChunkSchedule``): their chunks fall due together, so a batching generator makes one batch of them.
    A session starts (and resumes) up to a chunk later for it."""

    def lead(self, manifest: BackendManifest) -> float:
        """The lead in chunks for sessions of the backend ``manifest`` describes."""
        if self.lead_chunks is not None:
            return self.lead_chunks
        return lead_for(manifest, replaces=self.replaces(manifest))

    def replaces(self, manifest: BackendManifest) -> bool:
        """Whether a generated chunk not yet sent is replaced: on, and the backend can roll it back."""
        caps = manifest.capabilities
        return self.replace and caps.rollback_depth >= 1 and caps.snapshots != "none"


class Conductor:
    """Runs one session: feed it inputs and audio; it says what happens through the sink it is given."""

    def __init__(
        self,
        *,
        session_id: str,
        worker: GeneratorWorker,
        minds: Minds,
        bus: EventBus,
        ears: EarsService,
        player: SpeechPlayer,
        stamper: Stamper,
        config: ConductorConfig | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.session_id = session_id
        self.worker = worker
        self.minds = minds
        self.bus = bus
        self.ears = ears
        self.player = player
        self.stamper = stamper
        self.config = config or ConductorConfig()
        caps = worker.manifest.capabilities
        # Replacing a generated chunk rolls it back, and restores it when the replacement is too late.
        self.replaces = self.config.replaces(worker.manifest)
        # Redirecting a chunk in flight needs a cancel that stops it mid-chunk; without one, an urgent event
        # waits for the chunk to finish and then replaces it (or shows in the next chunk).
        self.redirects_in_flight = self.config.redirect and caps.interrupt in ("block", "step")
        self.exact_rewinds = caps.snapshots == "exact"
        """Whether a story rewind continues the picture exactly (else the client is told it does not)."""
        self.manifest = minds.realizer.manifest
        """The session's manifest: its clock paces and stamps the media, its picture sizes the frames."""
        self.clock = MediaClock.of(self.manifest)
        self.schedule = ChunkSchedule(
            self.clock,
            lead_chunks=self.config.lead(worker.manifest),
            redirect=self.config.redirect,
            redirect_margin=self.config.redirect_margin,
            finish_times=worker.finish_times,
            clock=clock,
            aligned=self.config.aligned,
        )
        self.media = MediaOut(
            session_id,
            self.schedule,
            player,
            (self.manifest.width, self.manifest.height),
            bus.tracer,
            self._out,
        )
        self.decider = Decider(minds, player, self.clock, lambda: self.media.last_frame)
        self.notices = Notices(bus, minds, self._out, self.metrics, self.config.metrics_every_s)
        self._encode = functools.partial(encode_frames, quality=self.config.jpeg_quality)
        """Finishes a chunk where it was made (after its decode): its frames as JPEG images."""
        self._sink: Sink | None = None
        self._attached = asyncio.Event()  # cleared while no client is there: generation pauses
        self._attached.set()
        self._tasks: list[asyncio.Task[None]] = []
        self._urgent: Subscription | None = None
        self.away = Away()
        """What the session said while no client was connected, for the client's return."""
        self.redirects = 0
        self.replaced = 0  # generated chunks regenerated before they were sent
        self._carry: set[str] = set()
        self._closed = False
        self._k = 0  # next chunk of the model and the realizer (goes back on a story rewind)
        self._m = 0  # next chunk of the media clock (only ever goes forward)
        self._boundary: asyncio.Queue[tuple[Callable[[], Awaitable[Any]], asyncio.Future[Any]]] = (
            asyncio.Queue()
        )
        self.story: StoryPlayer | None = None
        self._story_moved = False
        self._restoring = False  # a story rewind or resume is putting a checkpoint back
        self._resumed: Resumed | None = None  # another front end's minds, taken over
        # What another front end taking the session over needs of its minds, kept with each chunk.
        self._handover = Handover(minds) if worker.hands_over else None
        self.on_fatal: Callable[[str, BaseException], Coroutine[Any, Any, None]] | None = None
        """Set by the server: called once, with the task's name and its exception, if a task the session
        needs fails."""
        worker.on_moved = self._worker_moved

    @property
    def chunks_sent(self) -> int:
        return self.media.chunks_sent

    @property
    def chunks_on_time(self) -> int:
        return self.media.chunks_on_time

    @property
    def chunk_times(self) -> deque[float]:
        """Seconds each recent chunk took (the schedule's record)."""
        return self.schedule.chunk_times

    # ------------------------------------------------------------------------------ lifecycle

    async def start(self, sink: Sink) -> None:
        """Start listening, thinking, generating and sending."""
        self._sink = sink
        self._urgent = self.bus.subscribe(*URGENT, name="conductor", maxsize=64)
        notices = self.notices.loops()
        await self.ears.start()
        self.minds.start()
        if self._resumed is not None:
            self._resumed.tell(self.minds)
        if self.story is not None:
            self.story.subscribe(self._on_story_move)
            self._on_story_move(self.story.view())
            # Taken over, the story's checkpoints came as they were: none is taken again mid-beat.
            self._story_moved = self._story_moved and self._resumed is None
        self.schedule.begin(self.config.start_delay_s)
        self._tasks = [
            asyncio.create_task(self._generate_loop(), name=f"generate-{self.session_id}"),
            asyncio.create_task(self.media.run(), name=f"send-{self.session_id}"),
            *(asyncio.create_task(loop(), name=f"{name}-{self.session_id}") for name, loop in notices),
        ]
        for task in self._tasks:
            task.add_done_callback(self._task_done)

    async def continue_from(
        self, chunk: int, generator_state: object | None, resumed: Resumed | None = None
    ) -> None:
        """Before ``start``: go on from a checkpoint (a revived session) or from another front end's
        session (``resumed``, its minds already taken over): the generator's state, and the chunk the
        realizer decides next. The media clock of the new connection starts at 0."""
        if generator_state is not None:
            await self.worker.restore_state(generator_state)
        self._k = chunk
        self._restoring = True  # the first story.state (at start) says how exactly it continues
        if resumed is not None:
            self.stamper.prefix = resumed.event_prefix
            if self._handover is not None:
                self._handover.generation = resumed.generation
            self._resumed = resumed

    def attach(self, sink: Sink | None) -> None:
        """Point outputs at a new connection (resume), or at nothing while the client is away: then the
        session pauses after the chunk in flight, and on its return the media clock goes on from there."""
        self._sink = sink
        if sink is not None:
            self.media.retell()  # a new connection knows only the scene's defaults
        if sink is None and self._attached.is_set():
            self._attached.clear()
            self.schedule.pause()
            self.worker.paused = True  # its generator's load is not counted against new sessions
        elif sink is not None and not self._attached.is_set():
            self.schedule.resume()
            self.worker.paused = False
            self._attached.set()

    async def close(self) -> None:
        """Stop everything this session runs and free it. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self.story is not None:
            await self.story.close()
        await self.minds.stop()
        await self.player.close()
        await self.ears.close()
        self.bus.close()
        # Off the event loop: the chunk in flight finishes first, and other sessions must not wait for it.
        await self.worker.close()
        self.worker.on_moved = None  # it refers back to this conductor

    def _worker_moved(self, moved: WorkerMoved) -> None:
        """The generator's worker died and the session went on on another: the media clock waits out the
        freeze, and the client hears of it."""
        self.schedule.delay(moved.frozen_ms / 1000.0)
        log.warning(
            "session %s: its generator worker died; it continues on another from chunk %d after %.0f ms",
            self.session_id,
            moved.gen_chunk,
            moved.frozen_ms,
        )
        asyncio.get_running_loop().create_task(self._out(moved))

    def _task_done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled() or (exc := task.exception()) is None or self._closed:
            return
        if isinstance(exc, TakenOver):  # not a failure: the session goes on through another front end
            log.info("session %s: taken over by another front end", self.session_id)
        else:
            log.error("session %s: %s failed", self.session_id, task.get_name(), exc_info=exc)
        if self.on_fatal is not None:
            # The session cannot go on here without this task: the server tells the client and ends it.
            asyncio.get_running_loop().create_task(self.on_fatal(task.get_name(), exc))

    # ------------------------------------------------------------------------------ input

    async def audio(self, pcm: bytes) -> None:
        """One audio-in frame (PCM16 16 kHz); ``BadInput`` for a bad frame, nothing else changes."""
        await self.ears.push(pcm)

    async def publish(self, event: Event) -> None:
        """An input the client made (stamped by ``stamper``): onto the bus, where the minds take it."""
        await self.bus.publish(event)

    async def interrupt(self) -> Interrupt:
        """The user stops what the character is doing now: its speech and its current behavior."""
        event = self.stamper(Interrupt, reason="user")
        self.minds.realizer.interrupt(cause=event.id)
        self.player.interrupt(self.media.last_frame + 1)
        await self.bus.publish(event)
        return event

    async def run_plan(self, plan: str | dict) -> str:
        """Run a scripted behavior plan (a name or its object); its id. ``Refused`` names what is wrong."""
        manifest = self.minds.realizer.manifest
        try:
            # In a thread: validating a large plan is work the other sessions' chunks must not wait for.
            if isinstance(plan, str):
                script = await asyncio.to_thread(load_script, plan, manifest)
            else:
                script = await asyncio.to_thread(script_from_builtins, plan, manifest)
        except (ScriptError, ValueError, OSError) as exc:
            raise Refused(f"plan: {exc}") from None
        await self.minds.run_script(script)
        return self.stamper.next_id()

    async def story_choose(self, choice: str) -> str:
        """Pick an offered choice, between chunks; the event id. ``Refused`` if there is none such."""
        story, event_id = self._story("story.choose"), self.stamper.next_id()
        await self._story_move("story.choose", lambda: story.choose(choice, cause=event_id))
        return event_id

    async def story_intervene(self, text: str) -> str:
        """The user steps into the story, between chunks; the event id. ``Refused`` if nothing matches."""
        story, event_id = self._story("story.intervene"), self.stamper.next_id()
        answer = await self._story_move("story.intervene", lambda: story.intervene(text, cause=event_id))
        if answer.outcome == "unmatched":
            raise Refused(f"story.intervene: {answer.message}")
        return event_id

    async def story_rewind(self, checkpoint: str) -> str:
        """Go back to a checkpoint, between chunks; the event id. ``Refused`` for an unknown one."""
        story, event_id = self._story("story.rewind"), self.stamper.next_id()
        await self._story_move("story.rewind", lambda: self._rewind(story, checkpoint))
        return event_id

    def _story(self, kind: str) -> StoryPlayer:
        if self.story is None:
            raise Refused(f"{kind}: this session has no story")
        return self.story

    async def _story_move(self, kind: str, job: Callable[[], Awaitable[Any]]) -> Any:
        """Story moves happen between chunks, where the realizer and the generator agree (a checkpoint
        taken there continues the picture exactly); the client hears of them as a ``StoryMoved``."""
        try:
            return await self.at_boundary(job)
        except StoryError as exc:
            raise Refused(f"{kind}: {exc}") from None

    async def at_boundary(self, job: Callable[[], Awaitable[Any]]) -> Any:
        """Run ``job`` in the generation loop after the chunk in flight is committed, before the next is
        decided; returns its result (or raises its exception)."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._boundary.put_nowait((job, future))
        return await future

    async def _rewind(self, story: StoryPlayer, checkpoint: str) -> None:
        self._restoring = True
        try:
            restored = await story.rewind(
                checkpoint, lambda: self.player.interrupt(self.media.last_frame + 1)
            )
        finally:
            self._restoring = False
        if restored.generator is not None:
            await self.worker.restore_state(restored.generator)
        self._k = restored.chunk + 1

    def _on_story_move(self, view: StoryView) -> None:
        self._story_moved = True
        approximate, self._restoring = self._restoring and not self.exact_rewinds, False
        asyncio.get_running_loop().create_task(self._out(StoryMoved(view=view, approximate=approximate)))

    async def _at_boundary(self) -> bool:
        """Between chunks: run queued jobs, then re-take a moved story's checkpoint with the generator
        state that matches it now (a move made mid-chunk, by the Director, say, could not have it).
        True when anything ran."""
        moved = not self._boundary.empty() or (self.story is not None and self._story_moved)
        while not self._boundary.empty():
            job, future = self._boundary.get_nowait()
            try:
                future.set_result(await job())
            except Exception as exc:
                future.set_exception(exc)
        if self.story is not None and self._story_moved:
            self._story_moved = False
            await self.story.checkpoint(await self._capture())
        return moved

    # ------------------------------------------------------------------------------ generation

    async def _generate_loop(self) -> None:
        schedule = self.schedule
        staged: ReadyChunk | None = None  # generated, committed, not yet handed to the sender
        while True:
            await self._attached.wait()
            moved = await self._at_boundary()
            if staged is None:
                # The first chunk starts at once: a session's first generation runs about four times as
                # long as later ones (the worker thread's first pass through the model).
                start_at = schedule.now()
            else:
                # Handed over just before its first frame is due; a boundary job (a story move) may have
                # taken a checkpoint that includes it, so then it stays as it is.
                start_at = schedule.start_at(self._m)
                if self.replaces and not moved:
                    staged = await self._replace_until(staged, schedule.hand_at(staged.index))
                    if schedule.lead_chunks >= 1.0:
                        # The next chunk would start as this one goes out; no regeneration of this one would
                        # be ready any more, so it begins now, with a regeneration's time more for a slow
                        # making (a core stolen or shared). An input that comes meanwhile redirects it.
                        start_at = min(start_at, schedule.now())
                self.media.ready.put_nowait(staged)
            await schedule.clock.sleep_until(start_at)
            staged = await self._make_chunk(self._k, self._m)
            self._k += 1
            self._m += 1

    async def _replace_until(self, chunk: ReadyChunk, hand_at: float) -> ReadyChunk:
        """Hold a generated chunk until ``hand_at``; an urgent event that changes its decision while a
        regeneration still fits before its send time replaces it (the generator rolls back one chunk)."""
        while (event := await self._urgent_until(hand_at)) is not None:
            redo = await self._redecide(event, chunk, regenerate=self.replaces)
            if redo is None:
                continue
            if redo.out is None:
                chunk = adopt(chunk, redo.decision)
                continue
            chunk, done = await self._replace(chunk, redo)
            if not done:
                break
        return chunk

    async def _urgent_until(self, t: float) -> Event | None:
        """The next urgent event, or None once the session's clock reaches ``t``."""
        assert self._urgent is not None
        if self.schedule.now() >= t:
            return None
        due = asyncio.Event()
        timer = self.schedule.clock.call_at(t, due.set)
        event = asyncio.ensure_future(self._urgent.get())
        timeout = asyncio.ensure_future(due.wait())
        try:
            await asyncio.wait({event, timeout}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            timer.cancel()
            for waiter in (event, timeout):
                if not waiter.done():
                    waiter.cancel()
            # wait() rather than awaiting them: a CancelledError of theirs must not swallow ours.
            await asyncio.wait({event, timeout})
        return event.result() if not event.cancelled() else None

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
            jpegs = await self.worker.replace(redo.out.condition, cancel, self._encode)
        finally:
            timer.cancel()
        if jpegs is None:
            return None
        schedule.chunk_times.append(schedule.now() - started)
        return ReadyChunk(
            chunk.index,
            chunk.gen_chunk,
            jpegs,
            ordered(set(chunk.reflects) | set(redo.decision.reflects)),
            schedule.now(),
            redo.decision,
            redo.out.condition,
            chunk.begun_at,
            chunk.decided_at,
            replaced=True,
        )

    async def _make_chunk(self, k: int, m: int) -> ReadyChunk:
        """Generate chunk k (media chunk m) under the decider's decision, redirecting it while in flight
        when urgent events allow."""
        schedule = self.schedule
        begun = schedule.now()
        self._drain_urgent()  # what arrived since the last chunk is already in this decision
        with schedule.deciding(m) as overdue:
            decided = await self.decider.decide(k, m, overdue)
        # The chunk as it will be if nothing redirects it; a redirect or an adopted decision updates it.
        chunk = ReadyChunk(m, k, [], (), 0.0, decided.decision, decided.out.condition, begun, schedule.now())
        reflects = set(decided.decision.reflects) | self._carry
        self._carry = set()
        started = schedule.now()
        committing = 0.0  # the commit of the chunk before, which a regeneration of this one does not repeat
        late: Redecision | None = None  # a new decision that came after the denoising had finished
        while True:
            cancel = Cancel()
            await self._keep_minds()
            job = asyncio.ensure_future(self.worker.produce(chunk.condition, cancel, self._encode))
            redo = await self._watch(job, chunk, reflects)
            if redo is None:
                jpegs = job.result()
                committing += self._last_commit_s()
                break
            cancel.set()
            jpegs = await job
            committing += self._last_commit_s()
            if jpegs is not None:
                # It finished before it saw the flag (the flag is read between denoising steps, and decoding
                # takes about half the chunk time): the chunk is generated, so it may still be replaced.
                late = redo
                break
            assert redo.out is not None
            chunk.decision, chunk.condition = redo.decision, redo.out.condition
            reflects |= set(redo.decision.reflects)
            self.redirects += 1
        assert jpegs is not None
        schedule.chunk_times.append(schedule.now() - started - committing)
        chunk.jpegs, chunk.ready_at = jpegs, schedule.now()
        schedule.made_times.append(chunk.ready_at - chunk.decided_at)
        chunk.reflects = ordered(reflects)
        if late is not None:
            chunk, _ = await self._replace(chunk, late)
        return chunk

    async def _keep_minds(self) -> None:
        """Where another front end could take the session over: the minds as they are after deciding the
        chunk about to be made go with it (``agent.handover``)."""
        if self._handover is not None:
            notes = await self._handover.notes(story=self.story)
            self.worker.keep(notes)

    def _last_commit_s(self) -> float:
        """Seconds the produce that just returned spent committing the chunk before its own."""
        times = self.worker.commit_times
        return times[-1] if times else 0.0

    def _on_urgent(self, event: Event) -> None:
        if isinstance(event, SpeechStarted) and self.player.speaking:
            self.player.interrupt(self.media.last_frame + 1)  # the user talks over the character

    def _drain_urgent(self) -> None:
        assert self._urgent is not None
        while (event := self._urgent.get_nowait()) is not None:
            self._on_urgent(event)

    async def _watch(
        self, job: asyncio.Future[list[bytes] | None], chunk: ReadyChunk, reflects: set[str]
    ) -> Redecision | None:
        """Wait for ``job`` (generating ``chunk``); on an urgent event, re-decide it while the deadline
        allows a redo.

        Returns a new decision to generate (the caller cancels and regenerates), or None once ``job`` has
        finished. A re-decision that leaves the condition as it is becomes the chunk's (its events join
        ``reflects``) and the generation goes on.
        """
        assert self._urgent is not None
        if not self.redirects_in_flight:
            await asyncio.wait({job})  # urgent events wait, queued, for the replacement or the next chunk
            return None
        while True:
            waiter = asyncio.ensure_future(self._urgent.get())
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

    async def _redecide(self, event: Event, chunk: ReadyChunk, *, regenerate: bool) -> Redecision | None:
        """After an urgent event: once the reactive minds have answered it, re-decide ``chunk`` if a
        regeneration still fits before its send (None, and the event lands in the next chunk, if not)."""
        self._on_urgent(event)
        if not self.schedule.time_to_redo(chunk.index):
            return None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.bus.settle(), SETTLE_TIMEOUT_S)
        if not self.schedule.time_to_redo(chunk.index):
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

    async def _capture(self) -> SessionSnapshot | bytes | None:
        """The generator's state for a story checkpoint, encoded in the worker; None when the backend
        takes no snapshots (a rewind then continues the picture from wherever it is)."""
        if self.worker.manifest.capabilities.snapshots == "none":
            return None
        return await self.worker.capture()

    def metrics(self) -> Figures:
        """The session's figures now: frame rate over the last second, on-time share, reaction times."""
        return self.media.figures()

    @property
    def frames_dropped(self) -> int:
        """Media frames made while no client was connected (none of them sent)."""
        return self.away.media_dropped

    async def _out(self, item: Output) -> None:
        sink = self._sink
        if sink is None:
            self.away.hold(item)
            return
        if self.away:  # what the client missed while it was away goes first
            for held in self.away.take():
                await sink(held)
        await sink(item)
