"""The session conductor: one live session end to end, on the media clock.

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
realizer re-decide it; when the condition changed, the generator rolls back that one chunk and generates
it again (with replacement off, the proposal is discarded and the event shows in the next chunk). A
replacement that would be late is abandoned and the generator restored: the chunk already generated goes
out on time, and the events of its decision are reflected by the next chunk. Only chunks nobody has seen
are ever replaced.

Outcomes: every input event gets one. It shows in a frame's ``reflects``, or the client hears
``input.outcome`` saying why not: no mind answered it (once the reactive minds have settled and the
Director will not answer it either), or every block it caused ended unseen (``InputUnshown``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np

from agent.minds import Minds
from agent.progress import CharacterSpeech, DirectorError, DirectorPlan, InputUnshown
from agent.realizer import ChunkOutput
from agent.script import ScriptError, load_script, script_from_builtins
from agent.story.format import StoryError
from agent.story.player import StoryPlayer
from agent.story.state import StoryView
from events.bus import EventBus, Subscription
from events.ears import EarsService
from events.errors import BadInput
from events.gestures import client_gesture
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
    Transcript,
)
from server import protocol as p
from server.media import MediaClock, encode_jpeg, pcm16
from server.speech import SpeechPlayer
from streaming_model.condition import ChunkCondition
from streaming_model.runtime import SessionSnapshot
from streaming_model.worker import ModelWorker

log = logging.getLogger(__name__)

SETTLE_TIMEOUT_S = 0.05
"""A re-decision waits this long at most for the reactive minds to answer an event: they answer in the
same step that takes it, so only a stalled event loop can make it wait; then the event shows a chunk later."""

OUTCOMES_REMEMBERED = 512
"""How many inputs' outcomes the conductor remembers having sent (one outcome per input)."""

FINISH_SLACK_S = 0.01
"""A replacement still denoising when only the time to finish a chunk (commit, decode, encode: its p95 over
recent chunks) plus this is left before the send is abandoned, and the chunk already generated is sent.
Finishing cannot be interrupted, so this is the deadline that keeps replaced chunks on time."""

HANDOFF_S = 0.002
"""A generated chunk goes to the sender this long before its first frame is due."""

URGENT = (SpeechStarted, SpeechStopped, SoundOnset, SoundClass, Gesture, Interrupt, TextInput)
"""Events that may redirect the chunk in flight (the reflexes answer them)."""

ANSWERED = (SpeechStarted, SoundOnset, SoundClass, Gesture, TextInput, Transcript)
"""Inputs that get an outcome: a frame that reflects them, or ``input.outcome`` (an interrupt is always
reflected by the next chunk; a speech stop ends the listening its start began)."""


class ConductorConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Timing and quality knobs of one session."""

    lead_chunks: float = 1.0
    """Generation of chunk k starts this many chunks before its send time."""
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


@dataclass
class ReadyChunk:
    index: int  # on the media clock
    gen_chunk: int  # the generator's and realizer's chunk
    jpegs: list[bytes]
    reflects: tuple[str, ...]
    ready_at: float
    decision: ChunkOutput  # the realizer's, before the voice's envelope
    condition: ChunkCondition  # what was generated
    begun_at: float  # when its decision began (the generate loop's slot for it)
    decided_at: float  # when the decision was made (it may wait for the voice's synthesis)
    replaced: bool = False


@dataclass(frozen=True)
class Redecision:
    """A committed re-decision of a chunk: ``out`` (with the voice) to generate, or None when the frames
    already generated stand for it (its condition is theirs)."""

    decision: ChunkOutput
    out: ChunkOutput | None


Send = Callable[[bytes | str, bool], Awaitable[None]]
"""The connection's sender: (frame, droppable). Media frames are droppable for a slow client."""


class Conductor:
    """Runs one session: feed it client messages and audio; it sends messages and media through ``send``."""

    def __init__(
        self,
        *,
        session_id: str,
        worker: ModelWorker,
        minds: Minds,
        bus: EventBus,
        ears: EarsService,
        player: SpeechPlayer,
        stamper: Stamper,
        config: ConductorConfig | None = None,
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
        self.replaces = self.config.replace and caps.rollback_depth >= 1 and caps.snapshots != "none"
        self.exact_rewinds = caps.snapshots == "exact"
        """Whether a story rewind continues the picture exactly (else the client is told it does not)."""
        self.manifest = minds.realizer.manifest
        """The session's manifest: its clock paces and stamps the media, its picture sizes the frames."""
        self.clock = MediaClock.of(self.manifest)
        self._send: Send | None = None
        self._attached = asyncio.Event()  # cleared while no client is there: generation pauses
        self._attached.set()
        self._left_at = 0.0
        self._ready: asyncio.Queue[ReadyChunk] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []
        self._urgent: Subscription | None = None
        self._forward: Subscription | None = None
        self._seq = 0
        self._t0 = 0.0
        self.chunk_times: deque[float] = deque(maxlen=200)
        self.reactions_ms: deque[float] = deque(maxlen=500)
        self.frames_sent = 0
        self.frames_dropped = 0
        self.chunks_on_time = 0
        self.chunks_sent = 0
        self.redirects = 0
        self.replaced = 0  # generated chunks regenerated before they were sent
        self._sent_times: deque[float] = deque(maxlen=240)
        self._last_frame = -1
        self._carry: set[str] = set()
        self._outcomes: dict[str, None] = {}  # inputs answered with input.outcome
        self._closed = False
        self._k = 0  # next chunk of the model and the realizer (goes back on a story rewind)
        self._m = 0  # next chunk of the media clock (only ever goes forward)
        self._boundary: asyncio.Queue[tuple[Callable[[], Awaitable[Any]], asyncio.Future[Any]]] = (
            asyncio.Queue()
        )
        self.story: StoryPlayer | None = None
        self._story_moved = False
        self._restoring = False  # a story rewind or resume is putting a checkpoint back
        self.on_fatal: Callable[[p.Error], Coroutine[Any, Any, None]] | None = None
        """Set by the server: called once if a task the session needs fails."""

    # ------------------------------------------------------------------------------ lifecycle

    async def start(self, send: Send) -> None:
        """Start listening, thinking, generating and sending."""
        self._send = send
        self._urgent = self.bus.subscribe(*URGENT, name="conductor", maxsize=64)
        self._forward = forward = self.bus.subscribe(
            SpeechStarted,
            SpeechStopped,
            SoundOnset,
            SoundClass,
            Transcript,
            CharacterSpeech,
            DirectorPlan,
            DirectorError,
            InputUnshown,
            name="client",
            maxsize=256,
        )
        answered = self.bus.subscribe(*ANSWERED, name="outcomes", maxsize=256)
        await self.ears.start()
        self.minds.start()
        if self.story is not None:
            self.story.subscribe(self._on_story_move)
            self._on_story_move(self.story.view())
        loop = asyncio.get_running_loop()
        self._t0 = loop.time() + self.config.start_delay_s
        self._tasks = [
            asyncio.create_task(self._generate_loop(), name=f"generate-{self.session_id}"),
            asyncio.create_task(self._send_loop(), name=f"send-{self.session_id}"),
            asyncio.create_task(self._forward_loop(forward), name=f"forward-{self.session_id}"),
            asyncio.create_task(self._metrics_loop(), name=f"metrics-{self.session_id}"),
            asyncio.create_task(self._outcome_loop(answered), name=f"outcomes-{self.session_id}"),
        ]
        for task in self._tasks:
            task.add_done_callback(self._task_done)

    async def continue_from(self, chunk: int, generator_state: object | None) -> None:
        """Before ``start``: go on from a checkpoint (a revived session): the generator's state, and the
        chunk the realizer decides next. The media clock of the new connection starts at 0."""
        if generator_state is not None:
            await self.worker.restore_state(generator_state)
        self._k = chunk
        self._restoring = True  # the first story.state (at start) says how exactly it continues

    def attach(self, send: Send | None) -> None:
        """Point media at a new connection (resume), or at nothing while the client is away: then the
        session pauses after the chunk in flight, and on its return the media clock goes on from there."""
        self._send = send
        now = asyncio.get_running_loop().time()
        if send is None and self._attached.is_set():
            self._attached.clear()
            self._left_at = now
        elif send is not None and not self._attached.is_set():
            self._t0 += now - self._left_at
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

    def _task_done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled() or task.exception() is None or self._closed:
            return
        log.error("session %s: %s failed", self.session_id, task.get_name(), exc_info=task.exception())
        if self.on_fatal is not None:
            # The session cannot go on without this task: tell the client, then let the server end it.
            error = p.Error(
                code=p.ErrorCode.INTERNAL, message=f"the session failed ({task.get_name()})", fatal=True
            )
            asyncio.get_running_loop().create_task(self.on_fatal(error))

    # ------------------------------------------------------------------------------ input

    async def audio(self, pcm: bytes) -> None:
        """One audio-in frame (PCM16 16 kHz); ``BadInput`` for a bad frame, nothing else changes."""
        await self.ears.push(pcm)

    async def handle(self, msg: p.ClientMessage) -> list[p.ServerMessage]:
        """A client message after ``session.start``; returns the answers to send (``ProtocolError`` if bad)."""
        ref = msg.ref
        event: Event | None = None
        match msg:
            case p.Ping():
                return [p.Pong(ref=ref)]
            case p.InputText(text=text):
                event = self.stamper(TextInput, text=text)
            case p.InputGesture():
                try:
                    event = client_gesture(self.stamper, msg.gesture, msg.confidence, msg.x, msg.y)
                except BadInput as exc:
                    raise p.ProtocolError(p.ErrorCode.BAD_FIELD, str(exc), ref) from None
            case p.InputTranscript(text=text, final=final):
                event = self.stamper(Transcript, text=text, final=final, source="client")
            case p.ResponseInterrupt():
                event = self.stamper(Interrupt, reason="user")
                self.minds.realizer.interrupt(cause=event.id)
                self.player.interrupt(self._last_frame + 1)
            case p.PlanRun(plan=plan):
                await self._run_plan(plan, ref)
                return [p.InputAccepted(event_id=self.stamper.next_id(), kind="plan", ref=ref)]
            case p.SessionStart():
                raise p.ProtocolError(p.ErrorCode.BAD_FIELD, "the session has already started", ref)
            case p.StoryChoose() | p.StoryIntervene() | p.StoryRewind():
                return await self._story_message(msg)
        assert event is not None
        await self.bus.publish(event)
        return [p.InputAccepted(event_id=event.id, kind=_kind_of(event), ref=ref)]

    async def _story_message(self, msg: p.ClientMessage) -> list[p.ServerMessage]:
        """Story moves happen between chunks, where the realizer and the generator agree (a checkpoint
        taken there continues the picture exactly); the client hears of them as ``story.state``."""
        story = self.story
        kind = msg.__struct_config__.tag
        if story is None:
            raise p.ProtocolError(p.ErrorCode.BAD_FIELD, f"{kind}: this session has no story", msg.ref)
        event_id = self.stamper.next_id()
        try:
            match msg:
                case p.StoryChoose(choice=choice):
                    await self.at_boundary(lambda: story.choose(choice, cause=event_id))
                case p.StoryIntervene(text=text):
                    answer = await self.at_boundary(lambda: story.intervene(text, cause=event_id))
                    if answer.outcome == "unmatched":
                        raise p.ProtocolError(
                            p.ErrorCode.BAD_FIELD, f"story.intervene: {answer.message}", msg.ref
                        )
                case p.StoryRewind(checkpoint=checkpoint):
                    await self.at_boundary(lambda: self._rewind(story, checkpoint))
        except StoryError as exc:
            raise p.ProtocolError(p.ErrorCode.BAD_FIELD, f"{kind}: {exc}", msg.ref) from None
        return [p.InputAccepted(event_id=event_id, kind="story", ref=msg.ref)]

    async def at_boundary(self, job: Callable[[], Awaitable[Any]]) -> Any:
        """Run ``job`` in the generation loop after the chunk in flight is committed, before the next is
        decided; returns its result (or raises its exception)."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._boundary.put_nowait((job, future))
        return await future

    async def _rewind(self, story: StoryPlayer, checkpoint: str) -> None:
        self._restoring = True
        try:
            restored = await story.rewind(checkpoint)
        finally:
            self._restoring = False
        self.player.interrupt(self._last_frame + 1)
        if restored.generator is not None:
            await self.worker.restore_state(restored.generator)
        self._k = restored.chunk + 1

    def _on_story_move(self, view: StoryView) -> None:
        self._story_moved = True
        approximate, self._restoring = self._restoring and not self.exact_rewinds, False
        message = p.StoryState(
            node=view.node,
            choices=msgspec.to_builtins(view.choices),
            checkpoint=view.checkpoint,
            history=msgspec.to_builtins(view.history),
            variables=msgspec.to_builtins(view.variables),
            ending=view.ending,
            approximate=approximate,
        )
        asyncio.get_running_loop().create_task(self._out(p.encode_server(message), droppable=False))

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

    async def _run_plan(self, plan: str | dict, ref: str | None) -> None:
        manifest = self.minds.realizer.manifest
        try:
            # In a thread: validating a large plan is work the other sessions' chunks must not wait for.
            if isinstance(plan, str):
                script = await asyncio.to_thread(load_script, plan, manifest)
            else:
                script = await asyncio.to_thread(script_from_builtins, plan, manifest)
        except (ScriptError, ValueError, OSError) as exc:
            raise p.ProtocolError(p.ErrorCode.BAD_FIELD, f"plan: {exc}", ref) from None
        await self.minds.run_script(script)

    # ------------------------------------------------------------------------------ generation

    async def _generate_loop(self) -> None:
        loop = asyncio.get_running_loop()
        staged: ReadyChunk | None = None  # generated, committed, not yet handed to the sender
        while True:
            await self._attached.wait()
            moved = await self._at_boundary()
            start_at = self._t0 + (self._m - self.config.lead_chunks) * self.clock.chunk_s
            if staged is None:
                # The first chunk starts at once: a session's first generation runs about four times as
                # long as later ones (the worker thread's first pass through the model).
                start_at = loop.time()
            else:
                # Handed over just before its first frame is due; a boundary job (a story move) may have
                # taken a checkpoint that includes it, so then it stays as it is.
                hand_at = min(start_at, self._t0 + staged.index * self.clock.chunk_s - HANDOFF_S)
                if self.replaces and not moved:
                    staged = await self._replace_until(staged, hand_at)
                self._ready.put_nowait(staged)
            if (delay := start_at - loop.time()) > 0:
                await asyncio.sleep(delay)
            staged = await self._make_chunk(self._k, self._m)
            self._k += 1
            self._m += 1

    async def _replace_until(self, chunk: ReadyChunk, hand_at: float) -> ReadyChunk:
        """Hold a generated chunk until ``hand_at``; an urgent event that changes its decision while a
        regeneration still fits before its send time replaces it (the generator rolls back one chunk)."""
        assert self._urgent is not None
        loop = asyncio.get_running_loop()
        send_at = self._t0 + chunk.index * self.clock.chunk_s
        while (left := hand_at - loop.time()) > 0:
            try:
                event = await asyncio.wait_for(self._urgent.get(), left)
            except TimeoutError:
                break
            redo = await self._redecide(event, chunk, send_at, regenerate=self.replaces)
            if redo is None:
                continue
            if redo.out is None:
                chunk = _adopt(chunk, redo.decision)
                continue
            chunk, done = await self._replace(chunk, redo)
            if not done:
                break
        return chunk

    async def _replace(self, chunk: ReadyChunk, redo: Redecision) -> tuple[ReadyChunk, bool]:
        """Regenerate a generated, unsent chunk under ``redo`` if that is still ready in time: (the chunk to
        send, whether it was replaced). If not, the old chunk stays and the answer shows in the next one."""
        assert redo.out is not None
        send_at = self._t0 + chunk.index * self.clock.chunk_s
        deadline = send_at - self._finish_s() - FINISH_SLACK_S
        new = await self._regenerate(chunk, redo, deadline) if self.replaces else None
        if new is None:
            self._carry |= set(redo.decision.reflects)
            return chunk, False
        self.replaced += 1
        return new, True

    async def _regenerate(self, chunk: ReadyChunk, redo: Redecision, deadline: float) -> ReadyChunk | None:
        """Generate a committed, unsent chunk again under ``out``; None (and the old chunk kept, the
        generator as it was) when the new one would not be ready by ``deadline``."""
        loop = asyncio.get_running_loop()
        cancel = threading.Event()
        timer = loop.call_at(deadline, cancel.set)
        started = loop.time()
        assert redo.out is not None
        try:
            jpegs = await self.worker.replace(redo.out.condition, cancel, self._encode)
        finally:
            timer.cancel()
        if jpegs is None:
            return None
        self.chunk_times.append(loop.time() - started)
        reflects = tuple(sorted(set(chunk.reflects) | set(redo.decision.reflects), key=_event_order))
        return ReadyChunk(
            chunk.index,
            chunk.gen_chunk,
            jpegs,
            reflects,
            loop.time(),
            redo.decision,
            redo.out.condition,
            chunk.begun_at,
            chunk.decided_at,
            replaced=True,
        )

    def _typical(self) -> float:
        """Typical seconds to generate, commit, decode and encode one chunk."""
        return float(np.median(self.chunk_times)) if self.chunk_times else self.clock.chunk_s / 2

    def _finish_s(self) -> float:
        """Seconds that finishing a denoised chunk (commit, decode, encode) takes in 95 % of chunks."""
        finish = self.worker.finish_times
        return float(np.percentile(list(finish), 95)) if finish else self.clock.chunk_s / 4

    async def _voice(self, out: ChunkOutput, m: int) -> ChunkOutput:
        """The realizer's decision for media chunk m with the voice acted on and its real mouth envelope.

        Speech cued in chunk m starts sounding with chunk m+1: synthesis then has a whole chunk to get
        its first sentence ready, so it never holds up a chunk, and what the mouth does never depends on
        how fast synthesis happened to be (the same inputs give the same frames).
        """
        for speech_id in out.speech_stop:
            self.player.interrupt(self._last_frame + 1, speech_id)
        for cue in out.speech_start:
            self.player.start(cue, self.clock.first_frame(m + 1), cue_frame=self.clock.first_frame(m))
        envelope = await self.player.envelope(m)
        if envelope is not None:
            speaking = self.player.sounding(m)
            out = msgspec.structs.replace(
                out, condition=msgspec.structs.replace(out.condition, speaking=speaking, audio=envelope)
            )
        return out

    async def _make_chunk(self, k: int, m: int) -> ReadyChunk:
        """Generate chunk k (media chunk m) under the realizer's decision, redirecting it while in flight
        when urgent events allow."""
        loop = asyncio.get_running_loop()
        send_at = self._t0 + m * self.clock.chunk_s
        begun = loop.time()
        self._drain_urgent()  # what arrived since the last chunk is already in this decision
        decision = self.minds.tick(k)
        out = await self._voice(decision, m)
        decided = loop.time()
        # The chunk as it will be if nothing redirects it; a redirect or an adopted decision updates it.
        chunk = ReadyChunk(m, k, [], (), 0.0, decision, out.condition, begun, decided)
        reflects = set(decision.reflects) | self._carry
        self._carry = set()
        started = loop.time()
        late: Redecision | None = None  # a new decision that came after the denoising had finished
        while True:
            cancel = threading.Event()
            job = asyncio.ensure_future(self.worker.produce(chunk.condition, cancel, self._encode))
            redo = await self._watch(job, chunk, send_at, reflects)
            if redo is None:
                jpegs = job.result()
                break
            cancel.set()
            jpegs = await job
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
        self.chunk_times.append(loop.time() - started)
        chunk.jpegs, chunk.ready_at = jpegs, loop.time()
        chunk.reflects = tuple(sorted(reflects, key=_event_order))
        if late is not None:
            chunk, _ = await self._replace(chunk, late)
        return chunk

    def _on_urgent(self, event: Event) -> None:
        if isinstance(event, SpeechStarted) and self.player.speaking:
            self.player.interrupt(self._last_frame + 1)  # the user talks over the character

    def _drain_urgent(self) -> None:
        assert self._urgent is not None
        while (event := self._urgent.get_nowait()) is not None:
            self._on_urgent(event)

    async def _watch(
        self, job: asyncio.Future[list[bytes] | None], chunk: ReadyChunk, send_at: float, reflects: set[str]
    ) -> Redecision | None:
        """Wait for ``job`` (generating ``chunk``); on an urgent event, re-decide it while the deadline
        allows a redo.

        Returns a new decision to generate (the caller cancels and regenerates), or None once ``job`` has
        finished. A re-decision that leaves the condition as it is becomes the chunk's (its events join
        ``reflects``) and the generation goes on.
        """
        assert self._urgent is not None
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
            redo = await self._redecide(waiter.result(), chunk, send_at, regenerate=True)
            if redo is not None and redo.out is None:
                chunk.decision = redo.decision
                reflects |= set(redo.decision.reflects)
            elif redo is not None:
                return redo

    async def _redecide(
        self, event: Event, chunk: ReadyChunk, send_at: float, *, regenerate: bool
    ) -> Redecision | None:
        """After an urgent event: re-decide ``chunk`` if a regeneration still fits before ``send_at``.

        The realizer's proposal is committed when its condition is the chunk's (``out`` None: the frames
        stand for it) or when it is to be generated (``regenerate``); otherwise it is discarded and the
        event lands in the next chunk, as it does when there is no time (None).
        """
        self._on_urgent(event)
        if not self._time_to_redo(send_at):
            return None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.bus.settle(), SETTLE_TIMEOUT_S)
        if not self._time_to_redo(send_at):
            return None
        realizer = self.minds.realizer
        proposal = realizer.propose(chunk.gen_chunk)
        new = proposal.output
        if new.condition == chunk.decision.condition and not (new.speech_start or new.speech_stop):
            return Redecision(realizer.commit(proposal), None)
        if not regenerate:
            realizer.discard(proposal)
            return None
        out = await self._voice(realizer.commit(proposal), chunk.index)
        return Redecision(new, None if out.condition == chunk.condition else out)

    def _time_to_redo(self, send_at: float) -> bool:
        """Whether a regeneration started now still fits before ``send_at``."""
        left = send_at - asyncio.get_running_loop().time()
        return self.config.redirect and left >= self._typical() * self.config.redirect_margin

    def _encode(self, frames: np.ndarray) -> list[bytes]:
        """Worker thread: a chunk's frames as JPEG images (finishing it, with commit and decode)."""
        return [encode_jpeg(f, self.config.jpeg_quality) for f in frames]

    async def _capture(self) -> SessionSnapshot | bytes | None:
        """The generator's state for a story checkpoint, encoded in the worker; None when the backend
        takes no snapshots (a rewind then continues the picture from wherever it is)."""
        if self.worker.manifest.capabilities.snapshots == "none":
            return None
        return await self.worker.capture()

    # ------------------------------------------------------------------------------ output

    async def _send_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            chunk = await self._ready.get()
            send_at = self._t0 + chunk.index * self.clock.chunk_s
            self.chunks_sent += 1
            if chunk.ready_at <= send_at + 1e-3:
                self.chunks_on_time += 1
            else:
                log.warning(
                    "session %s: chunk %d ready %.0f ms late; its slot began %.0f ms before the send, the "
                    "decision took %.0f ms, generating %.0f ms%s",
                    self.session_id,
                    chunk.index,
                    1000 * (chunk.ready_at - send_at),
                    1000 * (send_at - chunk.begun_at),
                    1000 * (chunk.decided_at - chunk.begun_at),
                    1000 * (chunk.ready_at - chunk.decided_at),
                    " (replaced)" if chunk.replaced else "",
                )
            for i, jpeg in enumerate(chunk.jpegs):
                frame = self.clock.first_frame(chunk.index) + i
                if (delay := self._t0 + frame * self.clock.frame_s - loop.time()) > 0:
                    await asyncio.sleep(delay)
                self._last_frame = frame
                pts = self.clock.pts_ms(frame)
                audio = self.player.slice(frame)
                await self._out(
                    p.encode_media(
                        p.Kind.AUDIO_OUT,
                        p.AudioHeader(seq=self._next_seq(), pts_ms=pts, samples=audio.size),
                        pcm16(audio),
                    ),
                    droppable=True,
                )
                reflects = list(chunk.reflects) if i == 0 else []
                header = p.VideoHeader(
                    seq=self._next_seq(),
                    chunk=chunk.index,
                    frame=i,
                    pts_ms=pts,
                    width=self.manifest.width,
                    height=self.manifest.height,
                    reflects=reflects,
                    gen_chunk=chunk.gen_chunk,
                )
                await self._out(p.encode_media(p.Kind.VIDEO, header, jpeg), droppable=True)
                self._sent_times.append(loop.time())
                if reflects:
                    now_ns = time.monotonic_ns()
                    for event_id in reflects:
                        self.bus.tracer.record(event_id, "sent", now_ns)
                        latency = self.bus.tracer.latency_ms(event_id, "sent")
                        if latency is not None:
                            self.reactions_ms.append(latency)

    async def _forward_loop(self, sub: Subscription) -> None:
        async for event in sub:
            if isinstance(event, InputUnshown):
                await self._unshown(event.cause, event.reason, event.detail)
                continue
            msg = _to_client(event)
            if msg is not None:
                await self._out(p.encode_server(msg), droppable=False)

    async def _outcome_loop(self, sub: Subscription) -> None:
        """Answer every input no mind answered: once the reactive minds have settled, an input that no
        block was submitted for (and the Director will not answer) gets ``input.outcome``."""
        async for event in sub:
            if isinstance(event, Transcript) and event.source != "client":
                continue  # the server's transcript of speech whose start was already answered
            await self.bus.settle()
            director = self.minds.director
            if self.minds.realizer.caused(event.id) or (director is not None and director.answers(event)):
                continue
            reflex = self.minds.reflex
            declined = reflex.declined.get(event.id) if reflex is not None else None
            reason, detail = declined or (
                "no_reaction",
                f"nothing in this session answers {type(event).__struct_config__.tag}",
            )
            await self._unshown(event.id, reason, detail)

    async def _unshown(self, event_id: str, reason: str, detail: str) -> None:
        """Tell the client, once, that input ``event_id`` will not show and why."""
        if event_id in self._outcomes:
            return
        self._outcomes[event_id] = None
        if len(self._outcomes) > OUTCOMES_REMEMBERED:
            del self._outcomes[next(iter(self._outcomes))]
        message = p.InputOutcome(event_id=event_id, shown=False, reason=reason, detail=detail)
        await self._out(p.encode_server(message), droppable=False)

    async def _metrics_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.metrics_every_s)
            await self._out(p.encode_server(self.metrics()), droppable=False)

    def metrics(self) -> p.Metrics:
        """The session's figures now: frame rate over the last second, on-time share, reaction times."""
        now = asyncio.get_running_loop().time()
        fps = sum(1 for t in self._sent_times if now - t <= 1.0)
        reactions = np.asarray(self.reactions_ms) if self.reactions_ms else None
        return p.Metrics(
            fps=float(fps),
            on_time=self.chunks_on_time / self.chunks_sent if self.chunks_sent else 1.0,
            reaction_ms_p50=None if reactions is None else round(float(np.percentile(reactions, 50)), 1),
            reaction_ms_p95=None if reactions is None else round(float(np.percentile(reactions, 95)), 1),
            queue=self._ready.qsize(),
        )

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    async def _out(self, data: bytes | str, droppable: bool) -> None:
        send = self._send
        if send is None:
            if droppable:
                self.frames_dropped += 1
            return
        await send(data, droppable)


def _adopt(chunk: ReadyChunk, decision: ChunkOutput) -> ReadyChunk:
    """``chunk`` standing for a re-decision with its condition: the decision's events join its reflects."""
    reflects = tuple(sorted(set(chunk.reflects) | set(decision.reflects), key=_event_order))
    return dataclasses.replace(chunk, decision=decision, reflects=reflects)


def _event_order(event_id: str) -> tuple[int, str]:
    digits = "".join(c for c in event_id if c.isdigit())
    return (int(digits) if digits else 0, event_id)


def _kind_of(event: Event) -> str:
    return {
        TextInput: "text",
        Gesture: "gesture",
        Transcript: "transcript",
        Interrupt: "interrupt",
    }.get(type(event), str(type(event).__struct_config__.tag))


def _to_client(event: Event) -> p.ServerMessage | None:
    """The protocol message that tells the client about a bus event, if it is one the client hears of."""
    match event:
        case SpeechStarted():
            return p.InputSpeechStarted(event_id=event.id, audio_ms=event.audio_ms)
        case SpeechStopped():
            return p.InputSpeechStopped(event_id=event.id, audio_ms=event.audio_ms)
        case SoundOnset():
            return p.InputSound(event_id=event.id, label="onset", score=1.0, audio_ms=event.audio_ms)
        case SoundClass():
            return p.InputSound(
                event_id=event.id, label=event.label, score=event.score, audio_ms=event.audio_ms
            )
        case Transcript(source="server"):
            return p.InputTranscriptOut(event_id=event.id, text=event.text, final=event.final)
        case CharacterSpeech():
            return p.CharacterSpeech(text=event.text, state=event.state, heard_text=event.heard_text)
        case DirectorPlan():
            return p.DirectorPlan(plan_id=event.plan_id, epoch=event.epoch, summary=event.summary)
        case DirectorError():
            return p.Error(code="director", message=event.message, fatal=False)
    return None
