"""Story moves between chunks, where the realizer and the generator agree (a checkpoint taken there
continues the picture exactly): jobs wait for the chunk boundary (``at_boundary``), a moved story's
checkpoint is re-taken there with the generator state that matches it, a rewind puts the generator state
of its checkpoint back, and the client hears of every move as a ``StoryMoved``."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from agent.story.player import StoryPlayer
from agent.story.state import StoryView
from server.core.outputs import Output, StoryMoved
from streaming_model.runtime import SessionSnapshot
from streaming_model.worker import GeneratorWorker


class StoryMoves:
    """The moves of the story ``story`` gives (the session's, set after it is made), told through ``out``;
    ``cut_voice`` stops the character's speech after the last frame sent (a rewind goes back)."""

    def __init__(
        self,
        worker: GeneratorWorker,
        story: Callable[[], StoryPlayer | None],
        cut_voice: Callable[[], None],
        out: Callable[[Output], Coroutine[Any, Any, None]],
    ) -> None:
        self.worker = worker
        self._story = story
        self._cut_voice = cut_voice
        self._out = out
        self.exact_rewinds = worker.manifest.capabilities.snapshots == "exact"
        """Whether a story rewind continues the picture exactly (else the client is told it does not)."""
        self._boundary: asyncio.Queue[tuple[Callable[[], Awaitable[Any]], asyncio.Future[Any]]] = (
            asyncio.Queue()
        )
        self._story_moved = False
        self.restoring = False
        """A story rewind or resume is putting a checkpoint back (the next move tells how exactly the
        picture continues)."""

    def follow(self, story: StoryPlayer, *, taken_over: bool) -> None:
        """At the session's start: hear of ``story``'s moves, and tell the client where it stands now."""
        story.subscribe(self._on_story_move)
        self._on_story_move(story.view())
        # Taken over, the story's checkpoints came as they were: none is taken again mid-beat.
        self._story_moved = self._story_moved and not taken_over

    async def at_boundary(self, job: Callable[[], Awaitable[Any]]) -> Any:
        """Run ``job`` in the generation loop after the chunk in flight is committed, before the next is
        decided; returns its result (or raises its exception)."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._boundary.put_nowait((job, future))
        return await future

    async def rewind(self, story: StoryPlayer, checkpoint: str) -> int:
        """Go back to ``checkpoint`` (a job for ``at_boundary``): the generator chunk to make next."""
        self.restoring = True
        try:
            restored = await story.rewind(checkpoint, self._cut_voice)
        finally:
            self.restoring = False
        if restored.generator is not None:
            await self.worker.restore_state(restored.generator)
        return restored.chunk + 1

    def _on_story_move(self, view: StoryView) -> None:
        self._story_moved = True
        approximate, self.restoring = self.restoring and not self.exact_rewinds, False
        asyncio.get_running_loop().create_task(self._out(StoryMoved(view=view, approximate=approximate)))

    async def between_chunks(self) -> bool:
        """Between chunks: run queued jobs, then re-take a moved story's checkpoint with the generator
        state that matches it now (a move made mid-chunk, by the Director, say, could not have it).
        True when anything ran."""
        moved = not self._boundary.empty() or (self._story() is not None and self._story_moved)
        while not self._boundary.empty():
            job, future = self._boundary.get_nowait()
            try:
                future.set_result(await job())
            except Exception as exc:
                future.set_exception(exc)
        story = self._story()
        if story is not None and self._story_moved:
            self._story_moved = False
            await story.checkpoint(await self._capture())
        return moved

    async def _capture(self) -> SessionSnapshot | bytes | None:
        """The generator's state for a story checkpoint, encoded in the worker; None when the backend
        takes no snapshots (a rewind then continues the picture from wherever it is)."""
        if self.worker.manifest.capabilities.snapshots == "none":
            return None
        return await self.worker.capture()
