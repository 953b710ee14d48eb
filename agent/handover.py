"""A session's minds handed to another front end: what they hold after a chunk's decision, as notes a
generator slot keeps beside the session's generator (``server.cluster``), so that a front end taking the
session over goes on where the minds were instead of from the session's start.

    handover = Handover(minds)
    notes = await handover.notes(story=player)            # before each chunk call
    ...                                                    # (another front end)
    resumed = await take_over(minds, notes, next_chunk)    # before minds.start()
    stamper.prefix = resumed.event_prefix                  # its event ids, never the first's

Notes by name, so that what is large travels only when it changed: ``minds`` (every chunk: the realizer,
the scripted plan's place in its timeline and triggers, the inputs the Director owes, how many times the
session was taken over, a story's place between its checkpoints), ``director`` (the Director's memory, after each of its
runs), and for a story session ``story`` (its record: the story, its branches and history) and
``checkpoint/<id>`` (each checkpoint as its store holds it, sent when written), so that the new front
end's story store holds the session as the first one's did (a rewind there works). All are versioned blobs
(``streaming_model.blobs``), so a front end of another version refuses them rather than misreading them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import msgspec

from agent.director_state import DirectorMemory
from agent.minds import Minds
from agent.realizer import RealizerSnapshot, RealizerState
from agent.script_runner import RunnerState, ScriptRunner
from agent.story.player import StoryPlayer, StoryProgress
from agent.story.store import CheckpointRow, CheckpointStore, StoryRows
from streaming_model.blobs import VERSION, BlobError, unwrap, wrap

MINDS = "minds"
DIRECTOR = "director"
STORY = "story"
CHECKPOINT = "checkpoint/"


class HandoverError(ValueError):
    """Notes that cannot be taken over (unreadable, or of another chunk than the generator's)."""


class _MindsNote(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    version: int
    kind: Literal["minds"]
    chunk: int
    """The last chunk decided: the generator makes ``chunk + 1`` next."""
    generation: int
    """How many times the session had been taken over: the front end that takes it over now names its
    events under a prefix of its own (``Resumed.event_prefix``), as the first may have named some after
    its last note."""
    realizer: RealizerState
    script: RunnerState | None
    unanswered: list[str]
    """Inputs the Director had taken on and not answered."""
    story: StoryProgress | None


class _DirectorNote(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    version: int
    kind: Literal["director"]
    memory: DirectorMemory


class _StoryNote(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    version: int
    kind: Literal["story"]
    record: bytes
    """The story store's record of the session, as stored."""


class _CheckpointNote(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    version: int
    kind: Literal["checkpoint"]
    row: CheckpointRow


class Handover:
    """Takes a session's notes for a front end that may take it over."""

    def __init__(self, minds: Minds, generation: int = 0) -> None:
        self.minds = minds
        self.generation = generation
        """How many times the session was taken over before (``Resumed.generation`` on a front end that
        took it over)."""
        self._director_runs = 0  # the Director's runs when its memory was last noted
        self._story_saves = 0  # the story's writes to its store when its rows were last noted
        self._checkpoints: dict[str, float] = {}  # checkpoints noted, with the time each was written

    async def notes(self, story: StoryPlayer | None = None) -> dict[str, bytes]:
        """The minds' notes now (after a chunk's decision); the Director's only when a run of it ended
        since it was last noted; ``story``'s rows only when it wrote to its store since."""
        minds = self.minds
        note = _MindsNote(
            version=VERSION,
            kind="minds",
            chunk=minds.realizer.chunk,
            generation=self.generation,
            realizer=minds.realizer.state(),
            script=minds.script.state() if minds.script is not None else None,
            unanswered=list(minds.director.unanswered()) if minds.director is not None else [],
            story=story.progress() if story is not None else None,
        )
        notes = {MINDS: wrap(note)}  # encoded now: the note shares the realizer's own objects
        director = minds.director
        if director is not None and not director.busy and director.stats.runs != self._director_runs:
            self._director_runs = director.stats.runs
            memory = await director.snapshot()
            notes[DIRECTOR] = wrap(_DirectorNote(version=VERSION, kind="director", memory=memory))
        if story is not None and story.saves != self._story_saves:
            self._story_saves = story.saves
            notes.update(await self._story_rows(story))
        return notes

    async def _story_rows(self, story: StoryPlayer) -> dict[str, bytes]:
        """The story's record, and its checkpoints written since they were last noted."""
        rows = await story.store.rows(story.session, self._checkpoints)
        if rows is None:
            return {}
        notes = {STORY: wrap(_StoryNote(version=VERSION, kind="story", record=rows.record))}
        for row in rows.checkpoints:
            self._checkpoints[row.id] = row.created
            notes[CHECKPOINT + row.id] = wrap(_CheckpointNote(version=VERSION, kind="checkpoint", row=row))
        return notes


@dataclass(frozen=True)
class Resumed:
    """What a take-over leaves for the session: name its events under ``event_prefix``, note its minds as
    of ``generation``, and once it runs (``tell``) let the client know what the other front end left
    unfinished."""

    generation: int
    """How many times the session has been taken over, this time included."""
    unanswered: tuple[str, ...]
    """Inputs the other front end's Director had taken on and not answered."""
    story: StoryProgress | None = None
    """Where a story session's play was (``adopt_story`` goes on from it)."""

    @property
    def event_prefix(self) -> str:
        """The prefix of the session's event ids here: never one the front ends before gave out."""
        return f"t{self.generation}e"

    def tell(self, minds: Minds) -> None:
        """Once the session's notices listen: speech cued to the other front end's voice ends as
        interrupted (none of it sounds here), and the inputs its Director owed will not show."""
        minds.realizer.cut_voices()
        if minds.director is not None and self.unanswered:
            detail = "the session moved to another front end before the Director answered"
            minds.director.give_up(self.unanswered, detail)


async def take_over(minds: Minds, notes: Mapping[str, bytes], next_chunk: int) -> Resumed:
    """Put another front end's notes into ``minds`` (built afresh for the session, not started yet), for a
    generator that makes ``next_chunk`` next (``Resumed.tell`` what is left, once the session runs).
    ``HandoverError`` if the notes cannot be read or are of another chunk."""
    try:
        note = unwrap(notes[MINDS], "minds", _MindsNote)
        director = unwrap(notes[DIRECTOR], "director", _DirectorNote) if DIRECTOR in notes else None
        snapshot = RealizerSnapshot.from_state(note.realizer)
    except KeyError:
        raise HandoverError("the session's minds were never noted") from None
    except (BlobError, ValueError) as exc:
        raise HandoverError(f"the session's minds cannot be read: {exc}") from None
    if note.chunk + 1 != next_chunk:
        raise HandoverError(f"the minds were noted at chunk {note.chunk}, the generator is at {next_chunk}")
    minds.realizer.restore(snapshot)
    if note.script is not None:
        minds.script = ScriptRunner.from_state(note.script, minds.realizer)
    if minds.director is not None and director is not None:
        await minds.director.restore(director.memory)
    return Resumed(generation=note.generation + 1, unanswered=tuple(note.unanswered), story=note.story)


async def adopt_story(
    store: CheckpointStore, notes: Mapping[str, bytes], resumed: Resumed, *, session: str, minds: Minds
) -> StoryPlayer:
    """A story session taken over (``take_over`` first): its record and checkpoints from ``notes`` go into
    ``store``, and its player goes on where ``resumed`` says. ``HandoverError`` if they cannot be read;
    ``StoryError`` if the story no longer compiles here."""
    if resumed.story is None or STORY not in notes:
        raise HandoverError("the session's story was never noted")
    try:
        record = unwrap(notes[STORY], "story", _StoryNote).record
        rows = [
            unwrap(blob, "checkpoint", _CheckpointNote).row
            for name, blob in notes.items()
            if name.startswith(CHECKPOINT)
        ]
    except BlobError as exc:
        raise HandoverError(f"the session's story cannot be read: {exc}") from None
    await store.add_rows(StoryRows(session=session, record=record, checkpoints=rows))
    return await StoryPlayer.adopt(
        store, minds.realizer, resumed.story, session=session, director=minds.director, bus=minds.bus
    )
