"""What a realizer holds (its block entries and their voices) and its snapshots, as objects and as plain
data (``RealizerState``, what a story checkpoint stores)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

from agent.idle import IdleState, IdleVariety
from agent.plans import SOURCE_RANK, Block, Speech, Timing
from agent.realizer_outputs import ChunkOutput, SpeechCue
from events.vocabulary import Event


@dataclass
class Voice:
    """One speech behavior's life: when it started and what the voice reported."""

    speech_id: str
    behavior: Speech
    start: int | None = None
    cued: int | None = None
    """The chunk whose output cued it; ``start`` moves later when the voice reports a delay."""
    duration_s: float | None = None
    stopped_s: float | None = None
    envelope: tuple[float, ...] = ()
    announced: bool = False
    """``started`` was published: later duration updates from a streaming voice only retime."""
    finished: bool = False
    """No longer speaking, as far as the realizer is concerned (ended, cut, or never started)."""
    open: bool = False
    """More text is to come (``open_speech``): the voice does not end before ``extend_speech``."""
    owed_start: bool = False
    """``started`` is due but held until the whole text is known (open speech)."""

    @property
    def playing(self) -> bool:
        return self.start is not None and not self.finished


@dataclass(eq=False)  # identity: an entry is found in lists by what it is, not field by field
class Entry:
    """A submitted block: waiting (``start`` None) or running."""

    block: Block
    seq: int
    submitted: int
    after: set[str]
    start: int | None = None
    position: float = 0.0
    timings: dict[str, Timing] = field(default_factory=dict)
    shift: float | None = None
    fixed: dict[str, int] = field(default_factory=dict)
    voices: dict[str, Voice] = field(default_factory=dict)
    strokes: set[str] = field(default_factory=set)
    reflected: bool = False
    open: bool = False
    """Its speech is open (``Realizer.open_speech``) until ``extend_speech`` gives the whole text."""

    @property
    def rank(self) -> tuple[int, int, int]:
        return (SOURCE_RANK[self.block.source], self.block.priority, self.seq)


SNAPSHOT_FIELDS = (
    "_entries",
    "_voices",
    "_epochs",
    "_stops",
    "_last_k",
    "_position_before",
    "_reflected",
    "_counter",
    "position",
    "locks",
    "idle",
    "_interrupts",
    "_extends",
    "scene",
    "_scene_before",
)


class RealizerState(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A realizer snapshot as plain data (what a story checkpoint stores; see ``RealizerSnapshot.to_state``).

    entries: every block entry the snapshot holds, the realizer's own (waiting or running) first, then
    those only a voice still refers to (a block that ended while its speech plays on); ``active`` counts
    the first. voices: speech id -> (index into ``entries``, id of the speech behavior in that entry's
    voices), so that a voice and its entry stay one object after a decode, as the realizer needs.
    """

    entries: list[Entry]
    active: int
    voices: dict[str, tuple[int, str]]
    epochs: dict[str, int]
    stops: list[str]
    last_k: int
    position_before: float
    reflected: set[str]
    counter: int
    position: float
    locks: dict[str, str]
    idle: IdleState
    interrupts: list[str] = []
    """Interrupt events the next chunk decided reflects."""
    extends: list[SpeechCue] = []
    """Open speech extended since the last chunk decided (its cue with the whole text)."""
    scene: dict[str, str] = {}
    """The scene's parts set so far (part -> choice); a realizer from before the scene has none."""
    scene_before: dict[str, str] = {}


@dataclass
class Proposal:
    """A speculative re-decision (``Realizer.propose``): ``output`` holds only once committed."""

    output: ChunkOutput
    _before: dict[str, object]
    _held: list[Event]


@dataclass(frozen=True)
class RealizerSnapshot:
    """An opaque copy of a realizer's state (see ``Realizer.snapshot``)."""

    state: dict[str, object]

    def to_state(self) -> RealizerState:
        """The snapshot as plain data, for a format that cannot run code (``from_state`` reads it back)."""
        st: dict[str, Any] = self.state
        active: list[Entry] = st["_entries"]
        voiced: dict[str, tuple[Entry, Voice]] = st["_voices"]
        entries = list(active)
        index = {id(entry): i for i, entry in enumerate(entries)}
        voices: dict[str, tuple[int, str]] = {}
        for speech_id, (entry, voice) in voiced.items():
            if id(entry) not in index:
                index[id(entry)] = len(entries)
                entries.append(entry)
            key = next((k for k, v in entry.voices.items() if v is voice), None)
            if key is None:
                raise ValueError(f"realizer snapshot: voice {speech_id!r} is not one of its block's voices")
            voices[speech_id] = (index[id(entry)], key)
        return RealizerState(
            entries=entries,
            active=len(active),
            voices=voices,
            epochs=st["_epochs"],
            stops=st["_stops"],
            last_k=st["_last_k"],
            position_before=st["_position_before"],
            reflected=st["_reflected"],
            counter=st["_counter"],
            position=st["position"],
            locks=st["locks"],
            idle=st["idle"].state(),
            interrupts=st["_interrupts"],
            extends=st["_extends"],
            scene=st["scene"],
            scene_before=st["_scene_before"],
        )

    @classmethod
    def from_state(cls, state: RealizerState) -> RealizerSnapshot:
        """The snapshot ``to_state`` described; ``ValueError`` if its parts do not fit together."""
        entries = state.entries
        if not 0 <= state.active <= len(entries):
            raise ValueError(f"realizer state: {state.active} active entries of {len(entries)}")
        for entry in entries:
            # Arbitration tells a voice's speech by identity with its block's behavior: make them one again.
            speech = {b.id: b for b in entry.block.behaviors if isinstance(b, Speech)}
            for key, voice in entry.voices.items():
                if speech.get(key) != voice.behavior:
                    raise ValueError(
                        f"realizer state: voice {key!r} is not a speech of block {entry.block.id!r}"
                    )
                voice.behavior = speech[key]
        voices: dict[str, tuple[Entry, Voice]] = {}
        for speech_id, (i, key) in state.voices.items():
            found = entries[i].voices.get(key) if 0 <= i < len(entries) else None
            if found is None:
                raise ValueError(f"realizer state: voice {speech_id!r} names no voice of its entry")
            voices[speech_id] = (entries[i], found)
        if set(state.epochs) != set(SOURCE_RANK):
            raise ValueError(f"realizer state: epochs of {sorted(state.epochs)}, not of every source")
        return cls(
            {
                "_entries": entries[: state.active],
                "_voices": voices,
                "_epochs": dict(state.epochs),
                "_stops": list(state.stops),
                "_last_k": state.last_k,
                "_position_before": state.position_before,
                "_reflected": set(state.reflected),
                "_counter": state.counter,
                "position": state.position,
                "locks": dict(state.locks),
                "idle": IdleVariety.from_state(state.idle),
                "_interrupts": list(state.interrupts),
                "_extends": list(state.extends),
                "scene": dict(state.scene),
                "_scene_before": dict(state.scene_before),
            }
        )
