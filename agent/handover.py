"""A session's minds handed to another front end: what they hold after a chunk's decision, as notes a
generator slot keeps beside the session's generator (``server.cluster``), so that a front end taking the
session over goes on where the minds were instead of from the session's start.

    handover = Handover(minds)
    notes = await handover.notes(events_issued=stamper.issued)   # before each chunk call
    ...                                                           # (another front end)
    resumed = await take_over(minds, notes, next_chunk)           # before minds.start()

Two notes, so that what is large travels only when it changed: ``minds`` (every chunk: the realizer, the
scripted plan's place in its timeline and triggers, the inputs the Director owes, the session's event
numbering) and ``director`` (the Director's memory, after each of its runs). Both are versioned blobs
(``streaming_model.blobs``), so a front end of another version refuses them rather than misreading them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import msgspec

from agent.director import DirectorMemory
from agent.minds import Minds
from agent.realizer import RealizerSnapshot, RealizerState
from agent.script import RunnerState, ScriptRunner
from streaming_model.blobs import VERSION, BlobError, unwrap, wrap

MINDS = "minds"
DIRECTOR = "director"


class HandoverError(ValueError):
    """Notes that cannot be taken over (unreadable, or of another chunk than the generator's)."""


class _MindsNote(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    version: int
    kind: Literal["minds"]
    chunk: int
    """The last chunk decided: the generator makes ``chunk + 1`` next."""
    events: int
    """Event ids the session had given out."""
    realizer: RealizerState
    script: RunnerState | None
    unanswered: list[str]
    """Inputs the Director had taken on and not answered."""


class _DirectorNote(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    version: int
    kind: Literal["director"]
    memory: DirectorMemory


class Handover:
    """Takes a session's notes for a front end that may take it over."""

    def __init__(self, minds: Minds) -> None:
        self.minds = minds
        self._director_runs = 0  # the Director's runs when its memory was last noted

    async def notes(self, *, events_issued: int) -> dict[str, bytes]:
        """The minds' notes now (after a chunk's decision); the Director's only when a run of it ended
        since it was last noted."""
        minds = self.minds
        note = _MindsNote(
            version=VERSION,
            kind="minds",
            chunk=minds.realizer.chunk,
            events=events_issued,
            realizer=minds.realizer.state(),
            script=minds.script.state() if minds.script is not None else None,
            unanswered=list(minds.director.unanswered()) if minds.director is not None else [],
        )
        notes = {MINDS: wrap(note)}  # encoded now: the note shares the realizer's own objects
        director = minds.director
        if director is not None and not director.busy and director.stats.runs != self._director_runs:
            self._director_runs = director.stats.runs
            memory = await director.snapshot()
            notes[DIRECTOR] = wrap(_DirectorNote(version=VERSION, kind="director", memory=memory))
        return notes


@dataclass(frozen=True)
class Resumed:
    """What a take-over leaves for the session: number its events after ``events_issued``, and once it
    runs (``tell``) let the client know what the other front end left unfinished."""

    events_issued: int
    unanswered: tuple[str, ...]
    """Inputs the other front end's Director had taken on and not answered."""

    def tell(self, minds: Minds) -> None:
        """Once the session's notices listen: speech cued to the other front end's voice ends as
        interrupted (none of it sounds here), and the inputs its Director owed will not show."""
        minds.realizer.cut_voices()
        if minds.director is not None and self.unanswered:
            detail = "the session moved to another front end before the Director answered"
            minds.director.give_up(self.unanswered, detail)


async def take_over(minds: Minds, notes: Mapping[str, bytes], next_chunk: int) -> Resumed:
    """Put another front end's notes into ``minds`` (built afresh for the session, not started yet), for a
    generator that makes ``next_chunk`` next. Speech cued to the other front end's voice is cut.
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
    return Resumed(events_issued=note.events, unanswered=tuple(note.unanswered))
