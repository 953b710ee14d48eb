"""Playing a story in a live session: beats into the realizer, choices, interventions, checkpoints, rewind.

One ``StoryPlayer`` per session. It holds the session's graph (the base story plus branches added in this
session), the story state and the history tree, and acts on the session's minds:

- entering a beat ends the previous beat's plan and starts the beat's own (``agent.story.beat_plan``);
- every beat entered is a checkpoint: story state, the Director's memory, the realizer's snapshot and the
  generator's state (from ``capture``), saved in the ``CheckpointStore`` (SQLite);
- ``rewind`` puts all of that back and returns the generator state for the server to restore; the next
  move adds a sibling in the history tree, so both timelines stay;
- ``intervene`` takes free text: with an LLM Director it is handed to the Director, which maps it onto a
  choice (``story_choose``) or writes a branch (``story_add_branch``, see tools/story.py); without one, a
  choice named by id or by its words is taken, and otherwise the answer lists what can be chosen.

Checkpoints are exact when taken between ticks with the generator's state after its last committed chunk
(``capture`` is called right after a move; ``Restored.chunk`` is the realizer's last ticked chunk, so the
next chunk to tick and generate is ``chunk + 1``). A beat with a named scripted plan restarts that plan
from its beginning on a rewind: the plan's runner is not part of the snapshot, which is taken when the beat
is entered, before the runner's first tick.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import msgspec

from agent.director import Director
from agent.plans import Block, SetScene
from agent.realizer import Realizer
from agent.script import PLANS_DIR
from agent.script_runner import RunnerState, ScriptRunner
from agent.story.beat_plan import BeatPlan
from agent.story.engine import enter, initial_state, match_choice, offered, take, views
from agent.story.format import Beat, StoryError, StorySpec
from agent.story.graph import StoryGraph, compile_story
from agent.story.prompt import story_prompt
from agent.story.state import ChoiceView, HistoryNode, StoryState, StoryView, Via
from agent.story.store import Checkpoint, CheckpointStore, GeneratorState, SessionRecord
from events.bus import EventBus
from streaming_model.manifest import Manifest

Capture = Callable[[], GeneratorState | None]
"""Returns the generator's state now (the server passes the streaming runtime's ``snapshot``)."""
StateListener = Callable[[StoryView], None]

MAX_TEXT = 2000
"""Longest intervention text handed on (the protocol allows larger messages; the Director needs less)."""


class Intervention(msgspec.Struct, frozen=True, kw_only=True):
    """The answer to ``intervene``.

    outcome: ``chosen`` (the text named a choice, which was taken), ``asked`` (handed to the Director,
    whose move arrives as a later ``story.state``), or ``unmatched`` (no Director and no choice named:
    ``message`` says what can be chosen). choices: what is offered now (after the move, if one was made).
    """

    outcome: Literal["chosen", "asked", "unmatched"]
    message: str
    choices: list[ChoiceView]
    choice: str | None = None


class StoryProgress(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Where a story's play is between its checkpoints (``StoryPlayer.progress``): its state and current
    checkpoint, the intervention the Director is weighing, and the place of the beat's scripted plan."""

    state: StoryState
    current: str
    pending: str | None
    runner: RunnerState | None


@dataclass(frozen=True)
class Restored:
    """What a rewind (or a resume) put back: the story as it now stands, the generator's state for the
    server to restore (None if none was captured) and the realizer's last ticked chunk."""

    view: StoryView
    generator: GeneratorState | None
    chunk: int


class StoryPlayer:
    """A story played in one session. Build it with ``begin`` (a new story) or ``resume`` (from the store)."""

    def __init__(
        self,
        graph: StoryGraph,
        realizer: Realizer,
        store: CheckpointStore,
        *,
        session: str,
        state: StoryState,
        history: list[HistoryNode],
        current: str,
        director: Director | None = None,
        bus: EventBus | None = None,
        capture: Capture | None = None,
    ) -> None:
        self.graph = graph
        self.realizer = realizer
        self.store = store
        self.session = session
        self.state = state
        self.history = history
        self.current = current
        self.director = director
        self.capture = capture
        self._listeners: list[StateListener] = []
        self._lock = asyncio.Lock()
        self._plan = BeatPlan(realizer, bus)
        self._pending: str | None = None
        """The intervention text handed to the Director and not yet acted on."""
        self.saves = 0
        """Writes to the store so far (a handover sends the store's rows again when it changed)."""
        if director is not None:
            director.add_context(self.prompt)

    # ------------------------------------------------------------------------------ construction

    @classmethod
    async def begin(
        cls,
        story: StorySpec | StoryGraph,
        realizer: Realizer,
        *,
        session: str,
        manifest: Manifest | None = None,
        store: CheckpointStore | None = None,
        director: Director | None = None,
        bus: EventBus | None = None,
        capture: Capture | None = None,
        seed: int | None = None,
        plans_dir: Path = PLANS_DIR,
        cause: str | None = None,
    ) -> StoryPlayer:
        """Start ``story`` at its start beat (its plan goes to the realizer) and take the first checkpoint.

        ``story`` as written is compiled against ``manifest`` (the realizer's when None); ``StoryError``
        lists its problems. ``store`` defaults to an in-memory SQLite database.
        """
        graph = (
            story
            if isinstance(story, StoryGraph)
            else compile_story(story, manifest or realizer.manifest, plans_dir)
        )
        state = initial_state(graph, seed)
        player = cls(
            graph,
            realizer,
            store or CheckpointStore(),
            session=session,
            state=state,
            history=[],
            current="",
            director=director,
            bus=bus,
            capture=capture,
        )
        async with player._lock:
            await player._arrive(state, "start", cause=cause)
        return player

    @classmethod
    async def resume(
        cls,
        store: CheckpointStore,
        realizer: Realizer,
        *,
        session: str,
        manifest: Manifest | None = None,
        director: Director | None = None,
        bus: EventBus | None = None,
        capture: Capture | None = None,
        plans_dir: Path = PLANS_DIR,
    ) -> tuple[StoryPlayer, Restored]:
        """Continue ``session`` from ``store`` (a restarted server): the graph with its branches is rebuilt
        and the current checkpoint restored. ``StoryError`` if the store has no such session."""
        record, graph = await cls._saved(store, session, manifest or realizer.manifest, plans_dir)
        checkpoint = await store.checkpoint(session, record.current)
        if checkpoint is None:
            raise StoryError.one(
                "checkpoint", f"the store lacks checkpoint {record.current!r} of {session!r}"
            )
        player = cls(
            graph,
            realizer,
            store,
            session=session,
            state=checkpoint.state,
            history=list(record.history),
            current=record.current,
            director=director,
            bus=bus,
            capture=capture,
        )
        async with player._lock:
            restored = await player._restore(checkpoint)
        return player, restored

    @classmethod
    async def adopt(
        cls,
        store: CheckpointStore,
        realizer: Realizer,
        progress: StoryProgress,
        *,
        session: str,
        manifest: Manifest | None = None,
        director: Director | None = None,
        bus: EventBus | None = None,
        plans_dir: Path = PLANS_DIR,
    ) -> StoryPlayer:
        """Go on with ``session`` where another front end played it (its rows already in ``store``, the
        realizer and Director already as that front end left them): at ``progress``, the beat's plan going
        on from its place. ``StoryError`` if the store has no such session."""
        record, graph = await cls._saved(store, session, manifest or realizer.manifest, plans_dir)
        player = cls(
            graph,
            realizer,
            store,
            session=session,
            state=progress.state,
            history=list(record.history),
            current=progress.current,
            director=director,
            bus=bus,
        )
        player._pending = progress.pending
        if progress.runner is not None:
            player._plan.follow(ScriptRunner.from_state(progress.runner, realizer))
        return player

    @staticmethod
    async def _saved(
        store: CheckpointStore, session: str, manifest: Manifest, plans_dir: Path
    ) -> tuple[SessionRecord, StoryGraph]:
        """``session``'s record in ``store`` and its graph, branches included; ``StoryError`` if none."""
        record = await store.session(session)
        if record is None:
            raise StoryError.one("session", f"no story session {session!r} in the story store")
        return record, compile_story(record.story, manifest, plans_dir, record.branches)

    def progress(self) -> StoryProgress:
        """Where the play is now (``adopt`` goes on from it)."""
        return StoryProgress(
            state=self.state, current=self.current, pending=self._pending, runner=self._plan.runner_state()
        )

    # ---------------------------------------------------------------------------------- reading

    def subscribe(self, listener: StateListener) -> None:
        """Call ``listener(view)`` whenever the story moves (a choice, a branch, a rewind): the server sends
        ``story.state``. Moves made by the Director arrive only this way."""
        self._listeners.append(listener)

    def view(self) -> StoryView:
        """The story as it stands (the content of ``story.state``)."""
        beat = self.graph.beat(self.state.beat)
        choices = [] if beat.spec.ending else views(offered(self.graph, self.state))
        return StoryView(
            node=beat.id,
            choices=choices,
            checkpoint=self.current,
            history=list(self.history),
            story=self.graph.spec.id,
            title=beat.spec.title or beat.id,
            description=beat.spec.description,
            variables=dict(self.state.variables),
            ending=beat.spec.ending,
        )

    def prompt(self) -> str:
        """The story section of the Director's system prompt: where the story stands and how to steer it."""
        return story_prompt(self.graph, self.state)

    # ------------------------------------------------------------------------------------ moves

    async def choose(self, choice_id: str, *, cause: str | None = None) -> StoryView:
        """Take an offered choice (``story.choose``): effects, then its target beat is entered and becomes a
        checkpoint. ``StoryError`` names the problem (no such choice, condition not met, story ended)."""
        async with self._lock:
            choice, state = take(self.graph, self.state, choice_id)
            await self._arrive(state, "choice", choice=choice.id, cause=cause, scene=choice.spec.scene)
            return self.view()

    async def intervene(self, text: str, *, cause: str | None = None) -> Intervention:
        """The user steps into the story with free text (``story.intervene``); see ``Intervention``."""
        text = text.strip()[:MAX_TEXT]
        if not text:
            raise StoryError.one("text", "say what should happen")
        async with self._lock:
            choices = [] if self.graph.beat(self.state.beat).spec.ending else offered(self.graph, self.state)
            found = match_choice(text, choices)
            exact = found is not None and text.lower() in (found.id.lower(), found.spec.label.strip().lower())
            if found is not None and (self.director is None or exact):
                taken, state = take(self.graph, self.state, found.id)
                await self._arrive(
                    state, "intervention", choice=found.id, text=text, cause=cause, scene=taken.spec.scene
                )
                return Intervention(
                    outcome="chosen",
                    message=f"chose {found.id!r} ({found.spec.label})",
                    choices=self.view().choices,
                    choice=found.id,
                )
            if self.director is not None:
                self._pending = text
                listed = ", ".join(f"`{c.id}` ({c.spec.label})" for c in choices) or "none (rewind or branch)"
                self.director.observe(
                    f"The user steps into the story: {json.dumps(text)}. Choices offered: {listed}. "
                    "Call story_choose with the choice this means, or story_add_branch to write a new beat.",
                    cause=cause,
                )
                return Intervention(
                    outcome="asked", message="the Director is weighing it", choices=views(choices)
                )
            if not choices:
                message = "The story has ended; rewind to a checkpoint to take another way."
            else:
                listed = "; ".join(f"{c.id} ({c.spec.label})" for c in choices)
                message = f"Choose one of: {listed}."
                closed = [c for c in self.graph.beat(self.state.beat).choices if c not in choices]
                blocked = match_choice(text, closed)
                if blocked is not None and blocked.condition is not None:
                    message = (
                        f"{blocked.id} ({blocked.spec.label}) needs `{blocked.condition.source}`. {message}"
                    )
                else:
                    message = f"Without a Director the story can only take its own choices. {message}"
            return Intervention(outcome="unmatched", message=message, choices=views(choices))

    async def choose_for_director(self, choice_id: str) -> StoryView:
        """The Director maps the pending intervention onto a choice (its ``story_choose`` tool)."""
        async with self._lock:
            choice, state = take(self.graph, self.state, choice_id)
            text, self._pending = self._pending, None
            via: Via = "intervention" if text else "choice"
            await self._arrive(state, via, choice=choice.id, text=text, scene=choice.spec.scene)
            return self.view()

    async def add_branch(self, beat_id: str, beat: Beat) -> StoryView:
        """Validate ``beat`` as a branch of this session's story, add it, and enter it (the Director's
        ``story_add_branch``). ``StoryError`` lists what is wrong; the story is then unchanged."""
        async with self._lock:
            self.graph = self.graph.with_branch(beat_id, beat)
            text, self._pending = self._pending, None
            await self._arrive(enter(self.state, beat_id), "intervention", text=text)
            return self.view()

    async def checkpoint(self, generator_state: GeneratorState | None) -> str:
        """Take the current node's checkpoint again, now, with ``generator_state`` (for a server whose
        generator state becomes consistent only after the move, at the next chunk boundary)."""
        async with self._lock:
            await self._save(generator_state)
            return self.current

    async def rewind(self, checkpoint_id: str, leaving: Callable[[], object] | None = None) -> Restored:
        """Go back to a checkpoint (``story.rewind``): story state, Director memory and realizer are restored,
        and the generator's state is returned for the server to restore. The history keeps every node.
        ``leaving`` runs once the checkpoint is found, just before it is put back: what it reports to the
        realizer (the server cuts the voice of the timeline being left) still belongs to that timeline."""
        async with self._lock:
            if not any(node.checkpoint == checkpoint_id for node in self.history):
                known = [node.checkpoint for node in self.history]
                raise StoryError.one("checkpoint", f"no checkpoint {checkpoint_id!r}; checkpoints: {known}")
            checkpoint = await self.store.checkpoint(self.session, checkpoint_id)
            if checkpoint is None:
                raise StoryError.one("checkpoint", f"checkpoint {checkpoint_id!r} is missing from the store")
            if leaving is not None:
                leaving()
            restored = await self._restore(checkpoint)
            await self.store.save(self._record())
            self.saves += 1
            if self.director is not None:
                beat = self.graph.beat(self.state.beat)
                self.director.observe(
                    f"The story was rewound to beat `{beat.id}`: {beat.spec.description}", trigger=False
                )
        self._notify()
        return restored

    async def close(self) -> None:
        """Stop playing: the current beat's scripted plan stops (blocks already in the realizer play on) and
        the Director's prompt loses the story section. Checkpoints stay in the store."""
        async with self._lock:
            await self._plan.stop()
            if self.director is not None:
                self.director.remove_context(self.prompt)

    # ---------------------------------------------------------------------------------- inside

    async def _arrive(
        self,
        state: StoryState,
        via: Via,
        *,
        choice: str | None = None,
        text: str | None = None,
        cause: str | None = None,
        scene: Mapping[str, str] | None = None,
    ) -> None:
        """Enter ``state``'s beat: change the scene as the choice taken says (``scene``), play the beat's
        plan, add the history node and checkpoint it (lock held)."""
        self.state = state
        await self._plan.play(self.graph.beat(state.beat), cause)
        if scene:
            label = f"scene of choice {choice}"
            change = SetScene(changes=dict(scene))
            epoch = self.realizer.epoch("script")
            self.realizer.submit(
                Block(source="script", epoch=epoch, behaviors=[change], label=label, cause=cause)
            )
        node = HistoryNode(
            checkpoint=f"c{len(self.history) + 1}",
            beat=state.beat,
            via=via,
            parent=self.current or None,
            choice=choice,
            text=text,
        )
        self.history.append(node)
        self.current = node.checkpoint
        await self._save(self.capture() if self.capture is not None else None)
        if self.director is not None and via != "start":
            beat = self.graph.beat(state.beat)
            self.director.observe(
                f"The story moved to beat `{beat.id}`: {beat.spec.description}", trigger=False
            )
        self._notify()

    async def _restore(self, checkpoint: Checkpoint) -> Restored:
        """Put a checkpoint back (lock held)."""
        await self._plan.stop()
        self.state = checkpoint.state
        self.current = checkpoint.id
        self._pending = None
        if checkpoint.realizer is not None:
            self.realizer.restore(checkpoint.realizer)
        beat = self.graph.beat(self.state.beat)
        if beat.script is not None:
            self._plan.start(beat.script)  # fresh, as it was when the checkpoint was taken
        if self.director is not None and checkpoint.director is not None:
            await self.director.restore(checkpoint.director)
        return Restored(self.view(), checkpoint.generator, checkpoint.chunk)

    async def _save(self, generator_state: GeneratorState | None) -> None:
        checkpoint = Checkpoint(
            id=self.current,
            state=self.state,
            chunk=self.realizer.chunk,
            realizer=self.realizer.snapshot(),
            director=await self.director.snapshot() if self.director is not None else None,
            generator=generator_state,
        )
        await self.store.save(self._record(), checkpoint)
        self.saves += 1

    def _record(self) -> SessionRecord:
        return SessionRecord(
            session=self.session,
            story=self.graph.spec,
            branches=dict(self.graph.branches),
            history=list(self.history),
            current=self.current,
        )

    def _notify(self) -> None:
        view = self.view()
        for listener in self._listeners:
            listener(view)
