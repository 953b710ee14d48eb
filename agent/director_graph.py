"""The Director's langgraph graph (its flow is described in ``agent.director``): the ``fold``, ``think``
and ``act`` nodes, the system prompt of each LLM call, and the session's state in the checkpointer.

The Director runs the graph and lends it what a run needs of it (``RunHost``): it takes up what the run
answers, traces its stages and sends its plans.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
from collections.abc import Callable
from typing import Any, Protocol

import openai
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph

from agent.director_config import DirectorConfig
from agent.director_history import close_dangling_calls, rewrite_to_heard, trim
from agent.director_observations import Observations
from agent.director_state import DirectorMemory, DirectorState, DirectorStats
from agent.llm import AssistantTurn, ToolCall, complete
from agent.script import Place
from agent.streamed_speech import SENTENCE_BREAK, EarlySpeech, SayWatcher
from agent.tooling import ToolContext, ToolSet
from events.tracing import LLM_DONE, LLM_FIRST_TOKEN, LLM_REQUEST
from streaming_model.manifest import Manifest

ContextProvider = Callable[[], str]

MAX_CALLS = 16
"""Tool calls run from one reply; the rest are answered with an error (a reply of a thousand calls must
not flood the realizer)."""
MISSES = 2
"""Replies in a row without a usable tool call after which a run gives up: the LLM is told once what was
wrong (a truncated call, an unknown tool, an argument that fails validation) and may fix it."""
SPOKEN_CHARS = 400
"""Plain text spoken in place of ``say`` is cut to its first sentences within this many characters (small
models ramble, and the character speaks one or two sentences at a time)."""


class RunHost(Protocol):
    """What the graph's nodes need of the Director that runs them."""

    def begin_run(self, memory: list[str]) -> ToolContext:
        """Take up what the run answers; the context its tools act on, ``memory`` the facts kept so far."""
        ...

    def trace(self, stage: str) -> None:
        """Record ``stage`` of the run in flight under the input it answers."""
        ...

    def stale(self) -> bool:
        """Whether a later input made the run's plans stale."""
        ...

    def speaker(self) -> Callable[[str], None]:
        """What says a streaming reply's first sentence at once, as a plan of the run in flight."""
        ...


class DirectorGraph:
    """The graph of one session, its nodes, the system prompt of each call, and its checkpointed state."""

    def __init__(
        self,
        config: DirectorConfig,
        client: openai.AsyncOpenAI,
        tools: ToolSet,
        *,
        manifest: Manifest,
        places: dict[str, Place],
        observations: Observations,
        early: EarlySpeech,
        stats: DirectorStats,
        host: RunHost,
        session: str,
        checkpointer: BaseCheckpointSaver | None,
    ) -> None:
        """``places``, ``observations``, ``early`` and ``stats`` are the Director's own, shared; the state is
        kept under the thread id ``session``."""
        self.config = config
        self.client = client
        self.tools = tools
        self.manifest = manifest
        self.places = places
        self.observations = observations
        self.early = early
        self.stats = stats
        self.host = host
        self.contexts: list[ContextProvider] = []
        """Sections added to the system prompt, read at every call."""
        self._ctx: ToolContext | None = None
        self._unusable: list[str] = []
        """What this run's LLM replies had that could not be used (for the notice)."""
        self._call_ids = itertools.count(1)
        # Our own saver keeps only the latest checkpoint (``_compact``); a caller's keeps what it keeps.
        self._own_saver = InMemorySaver() if checkpointer is None else None
        self.compiled = self._build().compile(checkpointer=checkpointer or self._own_saver)
        self.thread: RunnableConfig = {
            "configurable": {"thread_id": session},
            "recursion_limit": 4 * config.max_steps + 8,
        }

    async def run(self) -> None:
        """Run the graph once, from ``fold``."""
        await self.compiled.ainvoke({"steps": 0, "spoke": False, "final": False}, self.thread)
        self._compact()

    async def values(self) -> dict[str, Any]:
        """The session's state as the next run starts from it."""
        snapshot = await self.compiled.aget_state(self.thread)
        return snapshot.values

    async def snapshot(self) -> DirectorMemory:
        """A copy of what the session's state keeps across runs."""
        values = await self.values()
        return DirectorMemory(
            messages=copy.deepcopy(list(values.get("messages", []))),
            memory=list(values.get("memory", [])),
            spoken=dict(values.get("spoken", {})),
        )

    async def restore(self, snapshot: DirectorMemory) -> None:
        """Make ``snapshot`` the session's state, as the ``fold`` node would (the next run starts from
        START anyway, with this state)."""
        await self.compiled.aupdate_state(
            self.thread,
            {
                "messages": copy.deepcopy(snapshot.messages),
                "memory": list(snapshot.memory),
                "spoken": dict(snapshot.spoken),
            },
            as_node="fold",
        )

    def unusable_reason(self) -> str:
        """What the last run's replies had that could not be used, in words."""
        if not self._unusable:
            return "an empty reply"
        names = ", ".join(dict.fromkeys(self._unusable))
        return f"tool calls that could not be used: {names}"

    def _compact(self) -> None:
        """Keep one checkpoint of the session's state: the saver stores every step of every run (about
        0.3 MiB a run with a full history, measured), and only the latest is ever read. Synchronous, so
        nothing reads the state between the delete and the write."""
        if self._own_saver is None:
            return
        values = self.compiled.get_state(self.thread).values
        self._own_saver.delete_thread(self.thread["configurable"]["thread_id"])
        self.compiled.update_state(self.thread, values, as_node="fold")

    def _build(self) -> StateGraph:
        graph = StateGraph(DirectorState)
        graph.add_node("fold", self._fold)
        graph.add_node("think", self._think)
        graph.add_node("act", self._act)
        graph.add_edge(START, "fold")
        graph.add_conditional_edges("fold", self._after_fold, ["think", END])
        graph.add_conditional_edges("think", self._after_think, ["act", END])
        graph.add_conditional_edges("act", self._after_act, ["think", END])
        return graph

    async def _fold(self, state: DirectorState) -> DirectorState:
        """New observations become a user message; cut speech is rewritten to what was heard."""
        # A deep copy: the rewrites below must not touch what the checkpointer holds.
        messages = close_dangling_calls(copy.deepcopy(state.get("messages", [])))
        spoken = dict(state.get("spoken", {}))
        seen = self.observations
        for block_id, heard in seen.heard:
            call_id = spoken.pop(block_id, None)
            if call_id is not None:
                rewrite_to_heard(messages, call_id, heard)
        seen.heard.clear()
        if seen.lines:
            messages.append({"role": "user", "content": "\n".join(seen.lines)})
            seen.lines.clear()
        messages = trim(messages, self.config.history_messages)
        kept = {c["id"] for m in messages for c in m.get("tool_calls") or []}
        spoken = {block: call for block, call in spoken.items() if call in kept}
        self._unusable = []
        self._ctx = self.host.begin_run(list(state.get("memory", [])))
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
        self.host.trace(LLM_REQUEST)
        watch = None
        if self.config.speak_while_streaming and self.config.stream:
            watch = SayWatcher(self.host.speaker(), SPOKEN_CHARS)
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
                    on_first_token=lambda: self.host.trace(LLM_FIRST_TOKEN),
                    watch=watch,
                )
        except BaseException:
            self.early.close()  # what was said stands; the reply that would have continued it is lost
            raise
        self.host.trace(LLM_DONE)
        if not turn.tool_calls:
            self.early.close()
        if (
            not turn.tool_calls
            and turn.text.strip()
            and self.config.text_as_speech
            and not state.get("spoke")
        ):
            # Plain text is what the character says: record it as the say call it stands for.
            turn = AssistantTurn("", [self._speech_call(turn.text)], turn.finish_reason)
        return {"messages": [*state["messages"], turn.message()]}

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
        self.early.close()  # the reply's say did not continue it (an unusable call): it stays as said
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
        if self.host.stale() or state.get("final") or state.get("steps", 0) >= self.config.max_steps:
            return END
        return END if state.get("misses", 0) >= MISSES else "think"

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
        parts += [provider() for provider in self.contexts]
        return "\n\n".join(p for p in parts if p)


def _first_sentences(text: str, limit: int = SPOKEN_CHARS) -> str:
    """The sentences of ``text`` that fit in ``limit`` characters (at least the first, cut at a word)."""
    text = " ".join(text.split())
    kept = ""
    for sentence in SENTENCE_BREAK.split(text):
        if len(kept) + len(sentence) + 1 > limit:
            break
        kept = f"{kept} {sentence}".strip()
    return kept or text[:limit].rsplit(" ", 1)[0] or text[:limit]
