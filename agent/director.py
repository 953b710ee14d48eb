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
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import itertools
import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypedDict

import msgspec
import openai
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph

from agent.acknowledge import Acknowledgement
from agent.director_config import DirectorConfig
from agent.llm import AssistantTurn, ToolCall, chat_client, complete, describe_failure
from agent.plans import Block, Speech
from agent.progress import (
    BlockDropped,
    BlockInterrupted,
    CharacterSpeech,
    DirectorError,
    DirectorPlan,
    InputUnshown,
    UnshownReason,
)
from agent.realizer import Realizer, Submission
from agent.script import Place
from agent.streamed_speech import SayWatcher, continuing
from agent.tooling import ToolContext, ToolSet
from events.bus import EventBus, Subscription
from events.stamp import Stamper
from events.tracing import (
    DIRECTOR_DONE,
    DIRECTOR_RUN,
    LLM_DONE,
    LLM_FIRST_TOKEN,
    LLM_REQUEST,
    SPEECH_END,
    TRANSCRIBED,
    TURN_ENDED,
)
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
ContextProvider = Callable[[], str]

_BARGE_IN = (SpeechStarted, Interrupt, TextInput, EndOfTurn)
_USER_ACTIVITY = (SpeechStarted, Transcript, TextInput, Gesture, EndOfTurn, Interrupt)
_CANCELLED_RESULT = json.dumps({"ok": False, "error": "not run: the user spoke first"})

MAX_CALLS = 16
"""Tool calls run from one reply; the rest are answered with an error (a reply of a thousand calls must
not flood the realizer)."""
MISSES = 2
"""Replies in a row without a usable tool call after which a run gives up: the LLM is told once what was
wrong (a truncated call, an unknown tool, an argument that fails validation) and may fix it."""
SPOKEN_CHARS = 400
"""Plain text spoken in place of ``say`` is cut to its first sentences within this many characters (small
models ramble, and the character speaks one or two sentences at a time)."""
_SENTENCE_END = re.compile(r"(?<=[.!?…])\s+")

log = logging.getLogger(__name__)


@dataclass
class _Early:
    """A reply's first sentence spoken while the reply streams: its open speech's block and text."""

    block_id: str
    text: str


@dataclass
class _Owed:
    """A user event that asked for an answer, and whether the character has acknowledged it yet."""

    event: Event
    acknowledged: bool = False


class DirectorState(TypedDict, total=False):
    """What the checkpointer keeps per session."""

    messages: list[dict[str, Any]]
    memory: list[str]
    spoken: dict[str, str]
    """Speech block id -> id of the ``say`` tool call that made it (to rewrite it to what was heard)."""
    steps: int
    spoke: bool
    final: bool
    misses: int
    """Replies in a row, up to now, without a usable tool call."""


class DirectorMemory(msgspec.Struct, frozen=True, kw_only=True):
    """What the Director keeps of a session (history, remembered facts, spoken block ids): a story
    checkpoint saves it and a rewind puts it back (see ``Director.snapshot``)."""

    messages: list[dict[str, Any]] = []
    memory: list[str] = []
    spoken: dict[str, str] = {}


class DirectorStats(msgspec.Struct):
    """Counters for tests, benchmarks and metrics."""

    runs: int = 0
    completed: int = 0
    cancelled: int = 0
    stale: int = 0
    failed: int = 0
    llm_calls: int = 0
    plans: int = 0
    unusable: int = 0
    """Runs that ended without a usable answer to what the user said (notice and acknowledgement)."""
    acknowledged: int = 0


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
        self.acknowledgement = acknowledgement or Acknowledgement(self.manifest)
        self.on_error = on_error
        self.stats = DirectorStats()
        self.errors: list[DirectorError] = []
        self._owns_client = client is None
        self.client = client or chat_client(config)
        # Our own saver keeps only the latest checkpoint (``_compact``); a caller's keeps what it keeps.
        self._own_saver = InMemorySaver() if checkpointer is None else None
        self._graph = self._build_graph().compile(checkpointer=checkpointer or self._own_saver)
        self._thread: RunnableConfig = {
            "configurable": {"thread_id": session},
            "recursion_limit": 4 * config.max_steps + 8,
        }
        self._stamp = Stamper(session, prefix="d")
        self._contexts: list[ContextProvider] = []
        self._inbox: list[Event] = []
        self._lines: list[str] = []
        self._heard: list[tuple[str, str]] = []
        self._server_transcript: list[str] = []
        self._late_turn: str | None = None
        """A turn (its id) ended before its transcript came: the next server transcript is its words."""
        self._causes: list[str] = []  # the inputs the next run answers, oldest first
        self._run_cause: str | None = None
        """The input the run in flight answers (the latest it took): its stages are traced under that id
        (``events.tracing``)."""
        self._owed: _Owed | None = None
        """The latest user event that asked for an answer and that no run has taken up yet."""
        self._run_owed: _Owed | None = None
        self._unusable: list[str] = []
        """What this run's LLM replies had that could not be used (for the notice)."""
        self._early: _Early | None = None
        """Speech opened from the reply streaming now, until the reply's ``say`` (or its end) closes it."""
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
        self._call_ids = itertools.count(1)

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
        self._lines.append(line)
        if trigger:
            self._request(cause)
        self._wake.set()

    def add_context(self, provider: ContextProvider) -> None:
        """Add a section to the system prompt, read at every call (the story's current beat, for one)."""
        self._contexts.append(provider)

    def remove_context(self, provider: ContextProvider) -> None:
        """Stop adding ``provider``'s section to the system prompt (a story closed in a running session)."""
        if provider in self._contexts:
            self._contexts.remove(provider)

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
        self._unshown(causes, "stale", detail)

    async def history(self) -> list[dict[str, Any]]:
        """The conversation as the next call will send it (without the system prompt)."""
        snapshot = await self._graph.aget_state(self._thread)
        return list(snapshot.values.get("messages", []))

    async def memory(self) -> list[str]:
        """Facts the LLM asked to remember."""
        snapshot = await self._graph.aget_state(self._thread)
        return list(snapshot.values.get("memory", []))

    async def snapshot(self) -> DirectorMemory:
        """A copy of what the Director keeps, for a story checkpoint."""
        values = (await self._graph.aget_state(self._thread)).values
        return DirectorMemory(
            messages=copy.deepcopy(list(values.get("messages", []))),
            memory=list(values.get("memory", [])),
            spoken=dict(values.get("spoken", {})),
        )

    async def restore(self, snapshot: DirectorMemory) -> None:
        """Go back to ``snapshot`` (a story rewind): a run in flight is cancelled and observations not yet
        read are dropped, as both belong to the timeline left behind."""
        run = self._run
        cut: tuple[str, ...] = ()
        if run is not None and not run.done() and run is not asyncio.current_task():
            run.cancel()
            await asyncio.wait({run})  # unlike awaiting it, a cancellation of the caller still propagates
            cut = self._unanswered_by_run()
        self._lines.clear()
        self._heard.clear()
        dropped, self._causes = self._causes, []
        # Every input gets an outcome: these (the run cut short, and those not read yet) will get no reply.
        detail = "the story went back to a checkpoint before the Director answered"
        self._unshown((*cut, *dropped), "stale", detail)
        # As the fold node: the next run starts from START anyway, with this state.
        await self._graph.aupdate_state(
            self._thread,
            {
                "messages": copy.deepcopy(snapshot.messages),
                "memory": list(snapshot.memory),
                "spoken": dict(snapshot.spoken),
            },
            as_node="fold",
        )

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
        c = self.config
        return (
            isinstance(event, TextInput | EndOfTurn)
            or (isinstance(event, Transcript) and event.final)
            or (isinstance(event, Gesture) and event.gesture in c.salient_gestures)
            or (isinstance(event, SoundClass) and event.label in c.salient_sounds and event.score >= 0.3)
        )

    def _take(self, event: Event) -> None:
        """Fold one event into the pending observations; ask for a run if it calls for an answer."""
        now = asyncio.get_running_loop().time()
        if isinstance(event, _USER_ACTIVITY):
            self._last_activity = now
            self._idle_fired = False
        if isinstance(event, _BARGE_IN) and self.busy:
            self._barge_in()
        trigger = False
        debounce_s = None  # the configured one
        if isinstance(event, EndOfTurn):
            debounce_s = self.config.turn_debounce_s
            text = (event.transcript or " ".join(self._server_transcript)).strip()
            self._server_transcript.clear()
            line = f"The user said: {json.dumps(text)}"
            if text and line not in self._lines:  # a client's final transcript may have said it already
                self._lines.append(line)
                trigger = True
            # A slow transcriber may finish after the turn ended: its transcript then answers this turn.
            self._late_turn = None if text else event.id
        elif isinstance(event, Transcript) and event.final:
            if event.source == "client" or self._late_turn is not None:
                if self._late_turn is not None:
                    debounce_s = self.config.turn_debounce_s
                    if self.bus is not None:
                        # The turn's trace carries on under the transcript, which is what the run answers.
                        self.bus.tracer.copy(self._late_turn, event.id, (SPEECH_END, TURN_ENDED))
                        self.bus.tracer.record(event.id, TRANSCRIBED, event.t_ns)
                self._late_turn = None
                self._lines.append(f"The user said: {json.dumps(event.text.strip())}")
                trigger = True
            else:
                self._server_transcript.append(event.text.strip())
        elif isinstance(event, TextInput):
            self._lines.append(f"The user typed: {json.dumps(event.text.strip())}")
            trigger = True
        elif isinstance(event, Gesture) and event.gesture in self.config.salient_gestures:
            self._lines.append(f"The user made a gesture: {event.gesture}")
            trigger = True
        elif (
            isinstance(event, SoundClass) and event.label in self.config.salient_sounds and event.score >= 0.3
        ):
            self._lines.append(f"A sound was heard: {event.label}")
            trigger = True
        elif isinstance(event, Interrupt):
            self._lines.append("The user interrupted you.")
        elif isinstance(event, CharacterSpeech) and event.state == "interrupted":
            self._heard.append((event.block_id, event.heard_text or ""))
            self._lines.append(f"You were cut off; the user heard only: {json.dumps(event.heard_text or '')}")
        elif isinstance(event, BlockDropped | BlockInterrupted):
            label = event.label or event.block_id
            self._lines.append(f"Your plan {json.dumps(label)} did not play to the end ({event.reason}).")
        if trigger:
            self._request(event.id, debounce_s)
            if not isinstance(event, SoundClass):  # a sound is noticed; only what the user does is owed
                self._owed = _Owed(event)

    def _barge_in(self) -> None:
        """The user spoke while a run was in flight: its plans are stale; cancel it if so configured."""
        if not self._stale():
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
        await self._graph.ainvoke({"steps": 0, "spoke": False, "final": False}, self._thread)
        self._compact()

    def _compact(self) -> None:
        """Keep one checkpoint of the session's state: the saver stores every step of every run (about
        0.3 MiB a run with a full history, measured), and only the latest is ever read. Synchronous, so
        nothing reads the state between the delete and the write."""
        if self._own_saver is None:
            return
        values = self._graph.get_state(self._thread).values
        self._own_saver.delete_thread(self._thread["configurable"]["thread_id"])
        self._graph.update_state(self._thread, values, as_node="fold")

    def _finish(self, run: asyncio.Task[None]) -> None:
        """Account for a finished run: success, cancellation, or a failure to report and retry; and
        acknowledge what the user did when the run sent no plan for it."""
        loop = asyncio.get_running_loop()
        self._trace(DIRECTOR_DONE)
        self._run_cause = None
        owed, self._run_owed = self._run_owed, None
        if owed is not None and (self._stale() or (self._ctx is not None and self._ctx.submitted)):
            owed = None  # answered, or a later turn of the user's supersedes it
        # The run's inputs that none of its blocks answers, but the one owed (acknowledged or carried).
        left = tuple(c for c in self._unanswered_by_run() if owed is None or c != owed.event.id)
        if run.cancelled():
            self.stats.cancelled += 1
            self._carry(owed)
            self._unshown(left, "stale", "a later input, or a story rewind, cut the Director's answer short")
            return
        exc = run.exception()
        if exc is None:
            self.stats.completed += 1
            self._attempt = 0
            if owed is not None:
                self.stats.unusable += 1
                self._notify(f"the LLM gave no usable answer ({self._unusable_reason()})", 1)
                self._acknowledge(owed)
            stale = self._stale()
            self._unshown(
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
            self._carry(owed)
        else:
            self._attempt = 0  # give up on this turn; the next trigger starts afresh
            self._unshown(left, "no_reaction", "the Director's LLM failed to answer")

    def _unanswered_by_run(self) -> tuple[str, ...]:
        """The inputs of the run just ended that it got no block accepted for (taken: asked once)."""
        causes, self._run_causes = self._run_causes, ()
        return () if self._ctx is not None and self._ctx.submitted else causes

    def _unshown(self, causes: tuple[str, ...], reason: UnshownReason, detail: str) -> None:
        """Tell the client, through the bus, that each of ``causes`` will not show, and why."""
        if self.bus is not None:
            for cause in causes:
                self.bus.publish_nowait(self._stamp(InputUnshown, cause=cause, reason=reason, detail=detail))

    def _carry(self, owed: _Owed | None) -> None:
        """The next run owes ``owed`` still, unless a newer event is owed already."""
        if self._owed is None:
            self._owed = owed

    def _notify(self, message: str, attempt: int) -> None:
        """Tell the client (a non-fatal ``director`` error) and ``on_error``."""
        error = self._stamp(DirectorError, message=message, attempt=attempt)
        self.errors.append(error)
        if self.bus is not None:
            self.bus.publish_nowait(error)
        if self.on_error is not None:
            self.on_error(error)

    def _acknowledge(self, owed: _Owed) -> None:
        """Show the user they were heard (once per event), in the Director's current epoch."""
        if owed.acknowledged:
            return
        owed.acknowledged = True
        block = self.acknowledgement.block(owed.event)
        if self._submit(block, self.realizer.epoch("director"), (owed.event.id,)).accepted:
            self.stats.acknowledged += 1

    def _unusable_reason(self) -> str:
        if not self._unusable:
            return "an empty reply"
        names = ", ".join(dict.fromkeys(self._unusable))
        return f"tool calls that could not be used: {names}"

    # ------------------------------------------------------------------------------------ graph

    def _build_graph(self) -> StateGraph:
        graph = StateGraph(DirectorState)
        graph.add_node("fold", self._fold)
        graph.add_node("think", self._think)
        graph.add_node("act", self._act)
        graph.add_edge(START, "fold")
        graph.add_conditional_edges("fold", self._after_fold, ["think", END])
        graph.add_conditional_edges("think", self._after_think, ["act", END])
        graph.add_conditional_edges("act", self._after_act, ["think", END])
        return graph

    def _stale(self) -> bool:
        return self._run_epoch < self.realizer.epoch("director")

    async def _fold(self, state: DirectorState) -> DirectorState:
        """New observations become a user message; cut speech is rewritten to what was heard."""
        # A deep copy: the rewrites below must not touch what the checkpointer holds.
        messages = _close_dangling_calls(copy.deepcopy(state.get("messages", [])))
        spoken = dict(state.get("spoken", {}))
        for block_id, heard in self._heard:
            call_id = spoken.pop(block_id, None)
            if call_id is not None:
                _rewrite_to_heard(messages, call_id, heard)
        self._heard.clear()
        if self._lines:
            messages.append({"role": "user", "content": "\n".join(self._lines)})
            self._lines.clear()
        messages = _trim(messages, self.config.history_messages)
        kept = {c["id"] for m in messages for c in m.get("tool_calls") or []}
        spoken = {block: call for block, call in spoken.items() if call in kept}
        epoch = self._run_epoch
        causes, self._causes = tuple(self._causes), []
        self._run_causes = causes
        self._run_cause = causes[-1] if causes else None
        self._trace(DIRECTOR_RUN)
        self._run_owed, self._owed = self._owed, None
        self._unusable = []
        self._ctx = ToolContext(
            submit=lambda block: self._submit(block, epoch, causes),
            places=self.places,
            memory=list(state.get("memory", [])),
        )
        return {
            "messages": messages,
            "spoken": spoken,
            "steps": 0,
            "spoke": False,
            "final": False,
            "misses": 0,
        }

    def _after_fold(self, state: DirectorState) -> str:
        messages = state.get("messages", [])
        return "think" if messages and messages[-1]["role"] in ("user", "tool") else END

    async def _think(self, state: DirectorState) -> DirectorState:
        self.stats.llm_calls += 1
        assert self._ctx is not None
        request = [{"role": "system", "content": self._system_prompt(self._ctx.memory)}, *state["messages"]]
        self._trace(LLM_REQUEST)
        watch = None
        if self.config.speak_while_streaming and self.config.stream:
            epoch = self._run_epoch
            watch = SayWatcher(lambda sentence: self._speak_early(sentence, epoch), SPOKEN_CHARS)
        try:
            async with asyncio.timeout(self.config.timeout_s):
                turn = await complete(
                    self.client,
                    model=self.config.model,
                    messages=request,
                    tools=self.tools.schemas(),
                    stream=self.config.stream,
                    temperature=self.config.temperature,
                    max_tokens=self.config.max_tokens,
                    on_first_token=lambda: self._trace(LLM_FIRST_TOKEN),
                    watch=watch,
                )
        except BaseException:
            self._close_early()  # what was said stands; the reply that would have continued it is lost
            raise
        self._trace(LLM_DONE)
        if not turn.tool_calls:
            self._close_early()
        if (
            not turn.tool_calls
            and turn.text.strip()
            and self.config.text_as_speech
            and not state.get("spoke")
        ):
            # Plain text is what the character says: record it as the say call it stands for.
            turn = AssistantTurn("", [self._speech_call(turn.text)], turn.finish_reason)
        return {"messages": [*state["messages"], turn.message()]}

    def _trace(self, stage: str) -> None:
        """Record ``stage`` of the run in flight under the input it answers (the first record wins)."""
        if self.bus is not None and self._run_cause is not None:
            self.bus.tracer.record(self._run_cause, stage)

    def _speech_call(self, text: str) -> ToolCall:
        """A ``say`` call for plain text of a reply (its first sentences)."""
        return ToolCall(f"speech_{next(self._call_ids)}", "say", json.dumps({"text": _first_sentences(text)}))

    def _after_think(self, state: DirectorState) -> str:
        # A stale run still acts: its plans reach the realizer and die there at dispatch (reported as
        # dropped), and the LLM's history records that they did not play.
        return "act" if state["messages"][-1].get("tool_calls") else END

    async def _act(self, state: DirectorState) -> DirectorState:
        assert self._ctx is not None
        ctx = self._ctx
        messages = list(state["messages"])
        spoken = dict(state.get("spoken", {}))
        spoke = bool(state.get("spoke"))
        at = len(messages) - 1  # the reply; its tool results follow it
        calls = messages[at]["tool_calls"]
        usable = False
        for index, call in enumerate(calls):
            if index >= MAX_CALLS:
                content = json.dumps(
                    {"ok": False, "error": f"not run: at most {MAX_CALLS} tool calls a reply"}
                )
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": content})
                continue
            before = len(ctx.submitted)
            name = call["function"]["name"]
            answer = await self.tools.call(name, call["function"]["arguments"], ctx)
            usable = usable or answer.ok
            if not answer.ok:
                self._unusable.append(name[:40] or "(no name)")
            if name == "say" and answer.ok:
                spoke = True
                for block_id in ctx.submitted[before:]:
                    spoken[block_id] = call["id"]
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": answer.to_text()})
        self._close_early()  # the reply's say did not continue it (an unusable call): it stays as said
        text = messages[at].get("content") or ""
        final = all(c["id"].startswith("speech_") for c in calls)
        if not usable and text.strip() and self.config.text_as_speech and not spoke:
            # Text beside calls that all failed is the answer: say it, as the call it stands for.
            say = self._speech_call(text)
            before = len(ctx.submitted)
            answer = await self.tools.call(say.name, say.arguments, ctx)
            if answer.ok:
                usable = spoke = final = True
                spoken.update(dict.fromkeys(ctx.submitted[before:], say.id))
                messages[at] = {**messages[at], "content": None, "tool_calls": [*calls, say.message()]}
                messages.append({"role": "tool", "tool_call_id": say.id, "content": answer.to_text()})
        return {
            "messages": messages,
            "memory": list(ctx.memory),
            "spoken": spoken,
            "steps": state.get("steps", 0) + 1,
            "spoke": spoke,
            # Text spoken in place of tool calls ends the run: there is nothing for the LLM to follow up.
            "final": final,
            "misses": 0 if usable else state.get("misses", 0) + 1,
        }

    def _after_act(self, state: DirectorState) -> str:
        if self._stale() or state.get("final") or state.get("steps", 0) >= self.config.max_steps:
            return END
        return END if state.get("misses", 0) >= MISSES else "think"

    def _speak_early(self, sentence: str, epoch: int) -> None:
        """Start saying a streaming reply's first sentence (``agent.streamed_speech``)."""
        block = Block(behaviors=[Speech(id="say", text=sentence)], composition="append", label="say")
        submission = self._submit(block, epoch, self._run_causes, open=True)
        if submission.accepted:
            self._early = _Early(submission.block_id, sentence)
            if self._ctx is not None:
                self._ctx.submitted.append(submission.block_id)  # the run has answered

    def _close_early(self) -> None:
        """The speech opened early keeps the text it has: nothing of the reply continued it."""
        early, self._early = self._early, None
        if early is not None:
            self.realizer.extend_speech(early.block_id)

    def _submit(self, block: Block, epoch: int, causes: tuple[str, ...], *, open: bool = False) -> Submission:
        """``block`` from the run of ``epoch``, answering every input the run took (the latest first);
        ``open``: a speech whose text is still streaming. A ``say`` continuing a speech opened early
        closes it with its whole text, as the same block."""
        cause = causes[-1] if causes else None
        block = msgspec.structs.replace(block, source="director", epoch=epoch, cause=cause, also=causes[:-1])
        early = self._early
        if early is not None and not open:
            self._early = None
            whole = continuing(block, early.text)
            if whole is not None:
                return self.realizer.extend_speech(early.block_id, whole)
            self.realizer.extend_speech(early.block_id)  # something else came first: it stays as said
        submission = self.realizer.open_speech(block) if open else self.realizer.submit(block)
        if submission.accepted:
            self.stats.plans += 1
            if self.bus is not None:
                summary = block.label or ", ".join(type(b).__name__.lower() for b in block.behaviors)
                self.bus.publish_nowait(
                    self._stamp(DirectorPlan, plan_id=submission.block_id, epoch=epoch, summary=summary)
                )
        return submission

    def _system_prompt(self, memory: list[str]) -> str:
        m = self.manifest
        parts = [
            self.config.persona,
            f"Actions you can perform: {', '.join(a.name for a in m.actions)}.",
            f"Emotions: {', '.join(m.emotions)}.",
            "Screen coordinates: x from -1 (left) to 1 (right), y from -1 (top) to 1 (bottom); the user is at 0, 0.",
        ]
        if self.places:
            parts.append(
                "Places in the scene: " + ", ".join(f"{n} (x={p.x:+.2f})" for n, p in self.places.items())
            )
        if memory:
            parts.append("Things you remember:\n" + "\n".join(f"- {fact}" for fact in memory))
        parts += [provider() for provider in self._contexts]
        return "\n\n".join(p for p in parts if p)


def _first_sentences(text: str, limit: int = SPOKEN_CHARS) -> str:
    """The sentences of ``text`` that fit in ``limit`` characters (at least the first, cut at a word)."""
    text = " ".join(text.split())
    kept = ""
    for sentence in _SENTENCE_END.split(text):
        if len(kept) + len(sentence) + 1 > limit:
            break
        kept = f"{kept} {sentence}".strip()
    return kept or text[:limit].rsplit(" ", 1)[0] or text[:limit]


def _close_dangling_calls(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Answer tool calls that a cancelled run left without results (the API requires an answer each)."""
    out: list[dict[str, Any]] = []
    waiting: list[str] = []
    for message in messages:
        if message["role"] == "tool":
            if message.get("tool_call_id") in waiting:
                waiting.remove(message["tool_call_id"])
        else:
            out += [{"role": "tool", "tool_call_id": cid, "content": _CANCELLED_RESULT} for cid in waiting]
            waiting = [c["id"] for c in message.get("tool_calls") or []]
        out.append(message)
    out += [{"role": "tool", "tool_call_id": cid, "content": _CANCELLED_RESULT} for cid in waiting]
    return out


def _rewrite_to_heard(messages: list[dict[str, Any]], call_id: str, heard: str) -> None:
    """Make the ``say`` call ``call_id`` say only ``heard``, and note the cut in its result."""
    for message in messages:
        for call in message.get("tool_calls") or []:
            if call["id"] == call_id:
                try:
                    arguments = json.loads(call["function"]["arguments"])
                except json.JSONDecodeError:
                    arguments = {}
                arguments["text"] = heard
                call["function"]["arguments"] = json.dumps(arguments)
        if message["role"] == "tool" and message.get("tool_call_id") == call_id:
            message["content"] = json.dumps({"ok": True, "interrupted": True, "heard_text": heard})


def _trim(messages: list[dict[str, Any]], keep: int) -> list[dict[str, Any]]:
    """The last ``keep`` messages or so, starting at a user message (never with orphaned tool results)."""
    if len(messages) <= keep:
        return messages
    users = [i for i, m in enumerate(messages) if m["role"] == "user"]
    inside = [i for i in users if i >= len(messages) - keep]
    if inside:
        return messages[inside[0] :]
    return messages[users[-1] :] if users else messages
