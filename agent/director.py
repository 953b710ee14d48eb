"""The Director: slow thinking. A langgraph graph run as a background task, one per session.

The Director reads the session's events (end of turn with transcript, typed text, gestures, sounds, plan
progress, the character's own speech), folds them into its state and, when something calls for an answer,
runs its graph: ``fold`` (new observations into the history) -> ``think`` (one chat-completions call,
streamed, tool-call deltas assembled) -> ``act`` (run the tools, which send plan blocks to the realizer)
-> ``think`` again while the LLM keeps calling tools, up to ``max_steps`` calls.

It never blocks the fast loop: the realizer keeps playing plans, idle and reflexes whatever the LLM does.
- Triggers are debounced and at most one run is in flight; triggers during a run start the next one.
- When the user speaks while a run is in flight (barge-in), the run is cancelled (``barge_in="cancel"``)
  or left to finish with its plans dead on arrival (``"stale"``); either way the Director's epoch in the
  realizer advances, so plans of the old run still waiting die at dispatch.
- With ``speak_while_streaming`` (the default) a streamed reply's first ``say`` starts speaking its first
  sentence while the rest of the reply still streams, and the call extends that same speech when the
  reply is whole (``agent.streamed_speech``).
- What the character said is what was heard: when its speech is cut, the ``say`` in the history is
  rewritten to ``heard_text`` before the next call.
- Failures (timeouts, HTTP errors, malformed or cut streams, replies too long, an endpoint that is down)
  publish a ``DirectorError`` (code ``director``, not fatal, its message a sentence from
  ``llm.describe_failure``), call ``on_error``, and the run is retried with exponential backoff,
  ``retries`` times. Broken or unknown tool calls are answered to the LLM as tool errors and are not
  failures; after ``MISSES`` replies in a row without a usable call the run gives up.
- The user is never left unanswered: plain text in a reply is spoken (also beside unusable tool calls).
  A run owes an answer when the user said, typed or gestured something; when it ends or fails having
  sent no plan, the character acknowledges (``agent.acknowledge``: the script's answer to that event, or a
  nod, labelled ``acknowledge``), once per event, and a run that ended without a usable answer publishes
  a ``DirectorError`` saying so.

State (history, memory, pending speech ids) is kept by a langgraph checkpointer per session (thread id):
the in-memory saver unless one is given (a SQLite saver makes it survive restarts).

Its parts: the graph (``agent.director_graph``, its history helpers in ``agent.director_history``), the
events turned into words (``agent.director_observations``), what is owed to the user's inputs
(``agent.director_outcomes``), the plans sent (``agent.director_plans``) and the state types
(``agent.director_state``); this module schedules the runs and accounts for how each ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import openai
from langgraph.checkpoint.base import BaseCheckpointSaver

from agent.acknowledge import Acknowledgement
from agent.director_config import DirectorConfig
from agent.director_graph import ContextProvider, DirectorGraph
from agent.director_observations import Observations
from agent.director_outcomes import Outcomes, Owed
from agent.director_plans import PlanSender
from agent.director_state import DirectorMemory, DirectorStats
from agent.llm import chat_client, describe_failure
from agent.plans import Block, Speech
from agent.progress import BlockDropped, BlockInterrupted, CharacterSpeech, DirectorError
from agent.realizer import Realizer
from agent.script import Place
from agent.streamed_speech import EarlySpeech
from agent.tooling import ToolContext, ToolSet
from events.bus import EventBus, Subscription
from events.stamp import Stamper
from events.tracing import DIRECTOR_DONE, DIRECTOR_RUN
from events.vocabulary import (
    EndOfTurn,
    Event,
    Gesture,
    Interrupt,
    SoundClass,
    SpeechStarted,
    TextInput,
    Transcript,
)
from streaming_model.manifest import Manifest, build_manifest

ErrorCallback = Callable[[DirectorError], None]

_BARGE_IN = (SpeechStarted, Interrupt, TextInput, EndOfTurn)
_USER_ACTIVITY = (SpeechStarted, Transcript, TextInput, Gesture, EndOfTurn, Interrupt)

log = logging.getLogger(__name__)


class Director:
    """One session's Director. ``start()`` it, feed it events (from the bus, or ``feed``), ``stop()`` it."""

    def __init__(
        self,
        config: DirectorConfig,
        realizer: Realizer,
        tools: ToolSet,
        *,
        bus: EventBus | None = None,
        session: str = "session",
        places: dict[str, Place] | None = None,
        client: openai.AsyncOpenAI | None = None,
        checkpointer: BaseCheckpointSaver | None = None,
        on_error: ErrorCallback | None = None,
        manifest: Manifest | None = None,
        acknowledgement: Acknowledgement | None = None,
    ) -> None:
        """``acknowledgement`` makes what the character does when no usable answer came (a nod by
        default; ``Minds`` passes one that knows the session's script)."""
        self.config = config
        self.realizer = realizer
        self.tools = tools
        self.bus = bus
        self.session = session
        self.places = dict(places or {})
        self.manifest = manifest or build_manifest()
        self.on_error = on_error
        self.stats = DirectorStats()
        self.errors: list[DirectorError] = []
        self._owns_client = client is None
        self.client = client or chat_client(config)
        self._stamp = Stamper(session, prefix="d")
        self._observations = Observations(config, bus)
        self._outcomes = Outcomes(bus, self._stamp, acknowledgement or Acknowledgement(self.manifest))
        self._early = EarlySpeech(realizer)
        """Speech opened from the reply streaming now, until the reply's ``say`` (or its end) closes it."""
        self._plans = PlanSender(realizer, self._early, self.stats, bus, self._stamp)
        self._graph = DirectorGraph(
            config,
            self.client,
            tools,
            manifest=self.manifest,
            places=self.places,
            observations=self._observations,
            early=self._early,
            stats=self.stats,
            host=self,
            session=session,
            checkpointer=checkpointer,
        )
        self._inbox: list[Event] = []
        self._causes: list[str] = []  # the inputs the next run answers, oldest first
        self._run_cause: str | None = None
        """The input the run in flight answers (the latest it took): its stages are traced under that id
        (``events.tracing``)."""
        self._run_causes: tuple[str, ...] = ()
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._feed_task: asyncio.Task[None] | None = None
        self._sub: Subscription | None = None
        self._run: asyncio.Task[None] | None = None
        self._run_epoch = 0
        self._ctx: ToolContext | None = None
        self._due: float | None = None
        self._not_before = 0.0
        self._attempt = 0
        self._last_activity = 0.0
        self._idle_fired = False

    # ------------------------------------------------------------------------------- lifecycle

    def start(self) -> None:
        """Subscribe to the bus now (nothing published after this is missed) and start the background task."""
        if self._loop_task is not None:
            return
        loop = asyncio.get_running_loop()
        self._last_activity = loop.time()
        if self.bus is not None:
            self._sub = self.bus.subscribe(name=f"director:{self.session}", where=self._wants)
            self._feed_task = asyncio.create_task(self._read_bus(self._sub), name="director-bus")
        self._loop_task = asyncio.create_task(self._main(), name=f"director:{self.session}")

    async def stop(self) -> None:
        """Cancel any run in flight, end the background tasks and close the HTTP client it made."""
        if self._sub is not None:
            self._sub.close()
        for task in (self._run, self._feed_task, self._loop_task):
            if task is not None and not task.done():
                task.cancel()
        for task in (self._run, self._feed_task, self._loop_task):
            if task is not None:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._loop_task = self._feed_task = self._run = None
        if self._owns_client:
            await self.client.close()

    def feed(self, event: Event) -> None:
        """Hand the Director an event directly (without a bus): benchmarks, tests, other minds."""
        self._inbox.append(event)
        self._wake.set()

    def observe(self, line: str, *, trigger: bool = True, cause: str | None = None) -> None:
        """Add an observation in words (a story move, a UI command...); ``trigger`` asks for a run."""
        self._observations.lines.append(line)
        if trigger:
            self._request(cause)
        self._wake.set()

    def add_context(self, provider: ContextProvider) -> None:
        """Add a section to the system prompt, read at every call (the story's current beat, for one)."""
        self._graph.contexts.append(provider)

    def remove_context(self, provider: ContextProvider) -> None:
        """Stop adding ``provider``'s section to the system prompt (a story closed in a running session)."""
        if provider in self._graph.contexts:
            self._graph.contexts.remove(provider)

    @property
    def busy(self) -> bool:
        """Whether a run is in flight."""
        return self._run is not None and not self._run.done()

    async def settle(self) -> None:
        """Wait until nothing is in flight, due or unread (wrap in ``asyncio.timeout``)."""
        while True:
            self._idle.clear()
            self._wake.set()
            await self._idle.wait()
            if not self.busy and self._due is None and not self._inbox:
                return

    def unanswered(self) -> tuple[str, ...]:
        """The inputs this Director has taken on and not answered yet (in the run in flight, waiting for
        the next, or not read yet), oldest first."""
        running = self._run_causes if self.busy else ()
        unread = (e.id for e in self._inbox if self.answers(e))
        return tuple(dict.fromkeys((*running, *self._causes, *unread)))

    def give_up(self, causes: tuple[str, ...], detail: str) -> None:
        """Tell the client that inputs another Director took on will not show (``stale``, ``detail``)."""
        self._outcomes.unshown(causes, "stale", detail)

    async def history(self) -> list[dict[str, Any]]:
        """The conversation as the next call will send it (without the system prompt)."""
        return list((await self._graph.values()).get("messages", []))

    async def memory(self) -> list[str]:
        """Facts the LLM asked to remember."""
        return list((await self._graph.values()).get("memory", []))

    async def snapshot(self) -> DirectorMemory:
        """A copy of what the Director keeps, for a story checkpoint."""
        return await self._graph.snapshot()

    async def restore(self, snapshot: DirectorMemory) -> None:
        """Go back to ``snapshot`` (a story rewind): a run in flight is cancelled and observations not yet
        read are dropped, as both belong to the timeline left behind."""
        run = self._run
        cut: tuple[str, ...] = ()
        if run is not None and not run.done() and run is not asyncio.current_task():
            run.cancel()
            await asyncio.wait({run})  # unlike awaiting it, a cancellation of the caller still propagates
            cut = self._unanswered_by_run()
        self._observations.clear()
        dropped, self._causes = self._causes, []
        # Every input gets an outcome: these (the run cut short, and those not read yet) will get no reply.
        detail = "the story went back to a checkpoint before the Director answered"
        self._outcomes.unshown((*cut, *dropped), "stale", detail)
        await self._graph.restore(snapshot)

    # ----------------------------------------------------------------------------------- intake

    def _wants(self, event: Event) -> bool:
        if isinstance(event, BlockDropped | BlockInterrupted | CharacterSpeech):
            return event.source == "director"
        return isinstance(event, (*_USER_ACTIVITY, SoundClass))

    async def _read_bus(self, sub: Subscription) -> None:
        async for event in sub:
            self.feed(event)

    def _request(self, cause: str | None, debounce_s: float | None = None) -> None:
        loop = asyncio.get_running_loop()
        if cause is not None and cause not in self._causes:
            self._causes.append(cause)
        wait = self.config.debounce_s if debounce_s is None else debounce_s
        self._due = max(loop.time() + wait, self._not_before)

    def answers(self, event: Event) -> bool:
        """Whether ``event`` asks this Director for an answer (its reply is then the input's outcome)."""
        return self._observations.answers(event)

    def _take(self, event: Event) -> None:
        """Fold one event into the pending observations; ask for a run if it calls for an answer."""
        now = asyncio.get_running_loop().time()
        if isinstance(event, _USER_ACTIVITY):
            self._last_activity = now
            self._idle_fired = False
        if isinstance(event, _BARGE_IN) and self.busy:
            self._barge_in()
        debounce_s = self._observations.take(event)
        if debounce_s is not None:
            self._request(event.id, debounce_s)
            if not isinstance(event, SoundClass):  # a sound is noticed; only what the user does is owed
                self._outcomes.owe(event)

    def _barge_in(self) -> None:
        """The user spoke while a run was in flight: its plans are stale; cancel it if so configured."""
        if not self.stale():
            self.realizer.advance_epoch("director")
            if self.config.barge_in == "stale":
                self.stats.stale += 1
        if self.config.barge_in == "cancel" and self._run is not None:
            self._run.cancel()

    # ------------------------------------------------------------------------------------- loop

    async def _main(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            inbox, self._inbox = self._inbox, []
            for event in inbox:
                self._take(event)
            if self._run is not None and self._run.done():
                self._finish(self._run)
                self._run = None
            now = loop.time()
            idle_s = self.config.idle_after_s
            if (
                idle_s is not None
                and self._run is None
                and self._due is None
                and not self._idle_fired
                and now - self._last_activity >= idle_s
            ):
                self._idle_fired = True
                self.observe(f"(The user has been quiet for {round(now - self._last_activity)} s.)")
            if self._run is None and self._due is not None and now >= self._due:
                self._due = None
                self._run_epoch = self.realizer.epoch("director")
                self._run = asyncio.create_task(self._invoke(), name="director-run")
                self._run.add_done_callback(lambda _: self._wake.set())
            timeout = None
            if self._run is None and self._due is not None:
                timeout = self._due - now
            elif self._run is None and idle_s is not None and not self._idle_fired:
                timeout = max(0.0, self._last_activity + idle_s - now)
            if not self._inbox and self._run is None and self._due is None:
                self._idle.set()
            self._wake.clear()
            if self._inbox:
                continue
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._wake.wait()

    async def _invoke(self) -> None:
        self.stats.runs += 1
        await self._graph.run()

    def _finish(self, run: asyncio.Task[None]) -> None:
        """Account for a finished run: success, cancellation, or a failure to report and retry; and
        acknowledge what the user did when the run sent no plan for it."""
        loop = asyncio.get_running_loop()
        self.trace(DIRECTOR_DONE)
        self._run_cause = None
        owed = self._outcomes.run_ended()
        if owed is not None and (self.stale() or (self._ctx is not None and self._ctx.submitted)):
            owed = None  # answered, or a later turn of the user's supersedes it
        # The run's inputs that none of its blocks answers, but the one owed (acknowledged or carried).
        left = tuple(c for c in self._unanswered_by_run() if owed is None or c != owed.event.id)
        if run.cancelled():
            self.stats.cancelled += 1
            self._outcomes.carry(owed)
            self._outcomes.unshown(
                left, "stale", "a later input, or a story rewind, cut the Director's answer short"
            )
            return
        exc = run.exception()
        if exc is None:
            self.stats.completed += 1
            self._attempt = 0
            if owed is not None:
                self.stats.unusable += 1
                self._notify(f"the LLM gave no usable answer ({self._graph.unusable_reason()})", 1)
                self._acknowledge(owed)
            stale = self.stale()
            self._outcomes.unshown(
                left,
                "stale" if stale else "no_reaction",
                "a later input superseded the Director's answer"
                if stale
                else "the Director's answer did not act on it",
            )
            return
        self.stats.failed += 1
        self._attempt += 1
        log.warning("the Director's LLM call failed (attempt %d): %r", self._attempt, exc)
        self._notify(describe_failure(exc, self.config.timeout_s), self._attempt)
        if owed is not None:
            self._acknowledge(owed)  # at the first failure: a retry may take as long again
        if self._attempt <= self.config.retries:
            delay = min(self.config.backoff_max_s, self.config.backoff_s * 2 ** (self._attempt - 1))
            self._not_before = loop.time() + delay
            self._causes = [*left, *(c for c in self._causes if c not in left)]  # the retry answers them
            self._request(None)
            self._outcomes.carry(owed)
        else:
            self._attempt = 0  # give up on this turn; the next trigger starts afresh
            self._outcomes.unshown(left, "no_reaction", "the Director's LLM failed to answer")

    def _unanswered_by_run(self) -> tuple[str, ...]:
        """The inputs of the run just ended that it got no block accepted for (taken: asked once)."""
        causes, self._run_causes = self._run_causes, ()
        return () if self._ctx is not None and self._ctx.submitted else causes

    def _notify(self, message: str, attempt: int) -> None:
        """Tell the client (a non-fatal ``director`` error) and ``on_error``."""
        error = self._stamp(DirectorError, message=message, attempt=attempt)
        self.errors.append(error)
        if self.bus is not None:
            self.bus.publish_nowait(error)
        if self.on_error is not None:
            self.on_error(error)

    def _acknowledge(self, owed: Owed) -> None:
        """Show the user they were heard (once per event), in the Director's current epoch."""
        block = self._outcomes.acknowledging(owed)
        if block is None:
            return
        if self._plans.submit(block, self.realizer.epoch("director"), (owed.event.id,)).accepted:
            self.stats.acknowledged += 1

    # -------------------------------------------------------------------------------------- run

    def begin_run(self, memory: list[str]) -> ToolContext:
        """Take up the inputs the run answers and the event it owes (``RunHost``); the context its tools
        act on, ``memory`` the facts kept so far."""
        epoch = self._run_epoch
        causes, self._causes = tuple(self._causes), []
        self._run_causes = causes
        self._run_cause = causes[-1] if causes else None
        self.trace(DIRECTOR_RUN)
        self._outcomes.take_up()
        self._ctx = ToolContext(
            submit=lambda block: self._plans.submit(block, epoch, causes),
            places=self.places,
            memory=memory,
        )
        return self._ctx

    def trace(self, stage: str) -> None:
        """Record ``stage`` of the run in flight under the input it answers (the first record wins)."""
        if self.bus is not None and self._run_cause is not None:
            self.bus.tracer.record(self._run_cause, stage)

    def stale(self) -> bool:
        """Whether the run in flight is stale: a later input advanced the Director's epoch in the realizer."""
        return self._run_epoch < self.realizer.epoch("director")

    def speaker(self) -> Callable[[str], None]:
        """What says a streaming reply's first sentence at once, in the run's epoch (``RunHost``)."""
        epoch = self._run_epoch
        return lambda sentence: self._speak_early(sentence, epoch)

    def _speak_early(self, sentence: str, epoch: int) -> None:
        """Start saying a streaming reply's first sentence (``agent.streamed_speech``)."""
        block = Block(behaviors=[Speech(id="say", text=sentence)], composition="append", label="say")
        submission = self._plans.submit(block, epoch, self._run_causes, open=True)
        if submission.accepted:
            self._early.opened(submission.block_id, sentence)
            if self._ctx is not None:
                self._ctx.submitted.append(submission.block_id)  # the run has answered
