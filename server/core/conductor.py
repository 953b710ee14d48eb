"""The session conductor: one live session end to end, on the media clock, free of any wire format.

    audio in -> ears -> bus -> minds (reflexes, script or Director -> realizer) -> generator -> media out

Timing (ARCHITECTURE.md, "The clock"): chunk k is sent at ``t0 + k*T`` (T, the chunk's length, and the
frame rate are the session's manifest's: 166.67 ms for the tiny model), frame by frame at the frames'
presentation times. Generation of chunk k starts ``lead`` chunks before that, so the generator
runs at most about one chunk ahead: every chunk generated early would be latency added to every reaction.

Its parts: ``schedule`` (when), ``decider`` (what), ``chunk_maker`` (each chunk's life: generate,
redirect, replace), ``urgent`` (the inputs that redirect or replace one), ``story_moves`` (the story's
moves between chunks), ``media_out`` (sending); here, the generation loop on the chunk clock and the
session's life (inputs, start and close). A transport feeds it inputs and takes its outputs
(``server.core.outputs``) through a ``Sink``.

Outcomes: every input event gets one (``notices``).
"""

from __future__ import annotations

import asyncio
import contextlib
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
from events.bus import EventBus
from events.ears import EarsService
from events.stamp import Stamper
from events.vocabulary import Event, Interrupt
from server.core.away import Away
from server.core.chunk import ReadyChunk
from server.core.chunk_maker import ChunkMaker
from server.core.decider import Decider
from server.core.foresight import Foresight
from server.core.media_out import MediaOut
from server.core.notices import Notices
from server.core.outputs import Figures, Output, Sink
from server.core.schedule import ChunkSchedule, Clock, lead_for
from server.core.story_moves import StoryMoves
from server.core.urgent import UrgentInputs
from server.media import MediaClock
from server.speech import SpeechPlayer
from streaming_model.backend import BackendManifest
from streaming_model.pool import TakenOver
from streaming_model.worker import GeneratorWorker, WorkerMoved

log = logging.getLogger(__name__)


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
    splice: bool = True
    """Splice a reaction into the unsent frames of the chunk playing, for a client that asks
    (``Conductor.splice``; ``server.core.chunk_maker``)."""
    foresee: bool = True
    """Where reactions are spliced: prepare the splice of an onset or a start of speech on its hunch, while it
    is confirmed, and show it only if it is (``server.core.foresight``)."""
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
        # Replacing a generated chunk rolls it back, and restores it when the replacement is too late.
        self.replaces = self.config.replaces(worker.manifest)
        self.manifest = minds.realizer.manifest
        """The session's manifest: its clock paces and stamps the media, its picture sizes the frames."""
        self.clock = MediaClock.of(self.manifest)
        self.schedule = self._schedule(clock)
        size = (self.manifest.width, self.manifest.height)
        self.media = MediaOut(session_id, self.schedule, player, size, bus.tracer, self._out)
        self.decider = Decider(minds, player, self.clock, lambda: self.media.last_frame)
        self.notices = Notices(bus, minds, self._out, self.metrics, self.config.metrics_every_s)
        self.urgent = UrgentInputs(bus, player, self.schedule, self._cut_voice)
        self.story: StoryPlayer | None = None
        self.moves = StoryMoves(worker, lambda: self.story, self._cut_voice, self._out)
        # What another front end taking the session over needs of its minds, kept with each chunk.
        self._handover = Handover(minds) if worker.hands_over else None
        self.maker = self._maker()
        self.maker.foresight.on = self.config.foresee
        ears.on_hunch = self.urgent.hunch
        self._sink: Sink | None = None
        self._attached = asyncio.Event()  # cleared while no client is there: generation pauses
        self._attached.set()
        self._tasks: list[asyncio.Task[None]] = []
        self.away = Away()
        """What the session said while no client was connected, for the client's return."""
        self._closed = False
        self._k = 0  # next chunk of the model and the realizer (goes back on a story rewind)
        self._m = 0  # next chunk of the media clock (only ever goes forward)
        self._resumed: Resumed | None = None  # another front end's minds, taken over
        self.on_fatal: Callable[[str, BaseException], Coroutine[Any, Any, None]] | None = None
        """Set by the server: called once, with the task's name and its exception, if a task the session
        needs fails."""
        worker.on_moved = self._worker_moved

    def _schedule(self, clock: Clock | None) -> ChunkSchedule:
        """The session's chunk timetable on ``clock`` (the process's by default)."""
        return ChunkSchedule(
            self.clock,
            lead_chunks=self.config.lead(self.worker.manifest),
            redirect=self.config.redirect,
            redirect_margin=self.config.redirect_margin,
            finish_times=self.worker.finish_times,
            clock=clock,
            aligned=self.config.aligned,
        )

    def _maker(self) -> ChunkMaker:
        """What makes the session's chunks, on its schedule, under the decider's decisions."""
        return ChunkMaker(
            self.worker,
            self.schedule,
            self.decider,
            self.urgent,
            self.bus,
            self.media,
            handover=self._handover,
            story=lambda: self.story,
            jpeg_quality=self.config.jpeg_quality,
            replaces=self.replaces,
            redirect=self.config.redirect,
        )

    def splice(self, asked: bool) -> bool:
        """Splice reactions into the chunk playing from now on where the client ``asked`` (it reads
        ``reflects`` on every frame), the server allows it (``ConductorConfig.splice``), chunks are
        replaced and the worker can make the chunk playing again (``GeneratorWorker.splices``); whether it
        does."""
        self.maker.splices = asked and self.config.splice and self.replaces and self.worker.splices
        return self.maker.splices

    @property
    def spliced(self) -> int:
        """Chunks made again while they played (a reaction spliced into them)."""
        return self.maker.spliced

    @property
    def foreseen(self) -> Foresight:
        """The splices prepared on hunches (counts of those started, shown and undone)."""
        return self.maker.foresight

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

    @property
    def redirects(self) -> int:
        """Chunks whose generation in flight was cancelled and started again under a new decision."""
        return self.maker.redirects

    @property
    def replaced(self) -> int:
        """Generated chunks regenerated before they were sent."""
        return self.maker.replaced

    # ------------------------------------------------------------------------------ lifecycle

    async def start(self, sink: Sink) -> None:
        """Start listening, thinking, generating and sending."""
        self._sink = sink
        self.urgent.subscribe()
        notices = self.notices.loops()
        await self.ears.start()
        self.minds.start()
        if self._resumed is not None:
            self._resumed.tell(self.minds)
        if self.story is not None:
            self.moves.follow(self.story, taken_over=self._resumed is not None)
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
        self.moves.restoring = True  # the first story.state (at start) says how exactly it continues
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
        self._cut_voice()
        await self.bus.publish(event)
        return event

    def _cut_voice(self) -> None:
        """Stop the character's speech after the last frame sent (the user interrupts or talks over it, or
        a story rewind goes back)."""
        self.player.interrupt(self.media.last_frame + 1)

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
            return await self.moves.at_boundary(job)
        except StoryError as exc:
            raise Refused(f"{kind}: {exc}") from None

    async def _rewind(self, story: StoryPlayer, checkpoint: str) -> None:
        self._k = await self.moves.rewind(story, checkpoint)  # the model and the realizer go back

    # ------------------------------------------------------------------------------ generation

    async def _generate_loop(self) -> None:
        schedule = self.schedule
        staged: ReadyChunk | None = None  # generated, committed, not yet handed to the sender
        while True:
            await self._attached.wait()
            moved = await self.moves.between_chunks()
            if staged is None:
                # The first chunk starts at once: a session's first generation runs about four times as
                # long as later ones (the worker thread's first pass through the model).
                start_at = schedule.now()
            else:
                # Handed over just before its first frame is due; a boundary job (a story move) may have
                # taken a checkpoint that includes it, so then it stays as it is.
                start_at = schedule.start_at(self._m)
                if self.replaces and not moved:
                    staged = await self.maker.replace_until(staged, schedule.hand_at(staged.index))
                    if schedule.lead_chunks >= 1.0:
                        # The next chunk would start as this one goes out; no regeneration of this one would
                        # be ready any more, so it begins now, with a regeneration's time more for a slow
                        # making (a core stolen or shared). An input that comes meanwhile redirects it.
                        start_at = min(start_at, schedule.now())
                self.media.hand(staged)
            await schedule.clock.sleep_until(start_at)
            staged = await self.maker.make(self._k, self._m)
            self._k += 1
            self._m += 1

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
