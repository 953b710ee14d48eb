"""The behavior realizer: plan blocks on the frame clock, arbitrated by source, into chunk conditions.

The session conductor calls ``tick(k)`` once per chunk, in order, and gets a ``ChunkOutput``: the
``ChunkCondition`` for chunk k, the speech to start and to stop, the scene events and the event ids whose
effect first shows in this chunk. Minds call ``submit(block)`` at any time; a block takes effect from the
next tick. Everything is synchronous and cheap, so the fast loop can call it without awaiting anything.

Arbitration: each channel (body, face, gaze, voice, scene) goes, chunk by chunk, to the active behavior
of the highest-ranked source (user > safety > reflex > script > director), then the higher priority, then
the newer block. A lower block keeps running on its own clock while it is outranked, so a reflex borrows
the body for a startle and hands it back. Speech cannot be paused: outranked speech is cut. A block's
``locks`` hold channels for its whole run. Free body and gaze channels play idle variety.

Speech: the realizer decides when speech starts (``SpeechCue`` in the chunk output) and estimates how long
it lasts. With ``voice="server"`` the server reports what really happened (``speech_started`` with the
audio's duration, ``speech_audio`` with its envelope, ``speech_ended``, ``speech_interrupted`` with the
heard text); with ``voice="estimate"`` (no audio backend) the realizer assumes speech plays as estimated.
Either way ``CharacterSpeech`` events are published, and an interruption carries ``heard_text``.

Re-deciding the chunk in flight is a transaction: ``propose(k)`` decides chunk k again as ``tick`` would,
but holds back everything it would report (progress, speech, reflected inputs) until ``commit``;
``discard`` puts the realizer back as it was, so a re-decision that is not used leaves no trace and its
inputs show in the next chunk decided.

Open speech (``open_speech``, then ``extend_speech``): a reply streamed by the LLM starts speaking its
first sentence while the rest still streams, and the rest extends the same speech (one speech id): chunk
outputs carry the extension (``speech_extend``), and the speech does not end while it is open. Its
``character.speech`` ``started`` is published once its whole text is known, with that text (just before
``interrupted`` when it is cut while still open).

Every block's cause (an input event id) gets an outcome: it shows in a chunk's ``reflects``, or, when the
last block it caused leaves without ever having owned a channel, an ``InputUnshown`` event says why.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from typing import Any, Literal

import msgspec

from agent.bounds import MAX_LIVE_BEHAVIORS, MAX_LIVE_BLOCKS
from agent.idle import IdleVariety
from agent.plan_checks import validate_block
from agent.plan_timing import WALK_SPEED_PER_S, block_length_s, resolve_pinned
from agent.plans import (
    SOURCE_RANK,
    WALKS,
    Action,
    Behavior,
    Block,
    Channel,
    Emotion,
    Gaze,
    Move,
    SceneEvent,
    SetScene,
    Source,
    Speech,
    SpeechFacts,
    behavior_channels,
    causes_of,
)
from agent.progress import (
    BlockDropped,
    BlockEnded,
    BlockInterrupted,
    BlockStarted,
    CharacterSpeech,
    InputUnshown,
    StrokeReached,
    UnshownReason,
)
from agent.realizer_outputs import ChunkOutput, SpeechCue, Submission
from agent.realizer_state import SNAPSHOT_FIELDS, Entry, Proposal, RealizerSnapshot, RealizerState, Voice
from agent.speech_timing import estimate_speech_s, heard_prefix
from events.bus import EventBus
from events.stamp import Stamper
from events.vocabulary import Event
from streaming_model.condition import ChunkCondition
from streaming_model.manifest import Manifest, build_manifest

VoiceReports = Literal["estimate", "server"]

SPEECH_WAIT_S = 10.0
"""How long speech waits for a voice held by a higher source before it is given up."""


TickListener = Callable[[int], None]
SpeechListener = Callable[[str], None]

RECENT_CAUSES = 1024
"""How many recent causes the realizer remembers having been given a block for (``caused``)."""


class Realizer:
    """Schedules plan blocks on the frame clock and produces each chunk's condition. One per session."""

    def __init__(
        self,
        bus: EventBus | None = None,
        *,
        session: str = "session",
        manifest: Manifest | None = None,
        idle: IdleVariety | None = None,
        voice: VoiceReports = "estimate",
    ) -> None:
        self.manifest = manifest or build_manifest()
        self._sets = {a.name: dict(a.sets) for a in self.manifest.actions if a.sets}
        self.bus = bus
        self.idle = idle or IdleVariety()
        self.voice = voice
        self.position = 0.0
        """Estimated floor x of the character in [-1, 1], integrated from the walks it dispatched."""
        self.scene: dict[str, str] = {}
        """The scene's parts set so far by ``SetScene`` behaviors and actions that set one (part -> choice,
        in the order first set); a part not here is at its default. Every condition carries it."""
        self._scene_before: dict[str, str] = {}
        self.locks: dict[str, str] = {}
        """Channel -> id of the block that held it in the last chunk."""
        self._stamp = Stamper(session, prefix="r")
        self._counter = 0
        self._epochs: dict[str, int] = dict.fromkeys(SOURCE_RANK, 0)
        self._entries: list[Entry] = []
        self._voices: dict[str, tuple[Entry, Voice]] = {}
        self._stops: list[str] = []
        self._listeners: list[TickListener] = []
        self._speech_listeners: list[SpeechListener] = []
        self._last_k = -1
        self._position_before = 0.0
        self._reflected: set[str] = set()
        self._interrupts: list[str] = []
        """Interrupt events whose effect (blocks stopped) the next chunk decided shows."""
        self._extends: list[SpeechCue] = []
        self._causes: dict[str, None] = {}
        self._held: list[Event] | None = None
        self._open: Proposal | None = None

    # ------------------------------------------------------------------------------------ clock

    @property
    def chunk(self) -> int:
        """The last chunk ticked (-1 before the first tick)."""
        return self._last_k

    def add_tick_listener(self, listener: TickListener) -> None:
        """Call ``listener(k)`` at the start of every tick, before chunk k is arbitrated (scripts use it)."""
        self._listeners.append(listener)

    def remove_tick_listener(self, listener: TickListener) -> None:
        """Stop calling ``listener`` (a story moving to a beat with another plan)."""
        if listener in self._listeners:
            self._listeners.remove(listener)

    def add_speech_listener(self, listener: SpeechListener) -> None:
        """Call ``listener(text)`` with the first speech of every block accepted, as it is submitted: before
        a chunk cues it (the server's voice starts synthesising it then)."""
        self._speech_listeners.append(listener)

    # ----------------------------------------------------------------------------------- epochs

    def epoch(self, source: str) -> int:
        """The current epoch of ``source``: its blocks with a smaller epoch die at dispatch."""
        return self._epochs[source]

    def advance_epoch(self, source: str) -> int:
        """Make every block of ``source`` submitted so far stale; returns the new epoch."""
        self._epochs[source] += 1
        for entry in [e for e in self._entries if e.start is None and e.block.source == source]:
            self._drop(entry, "stale")
        return self._epochs[source]

    # ------------------------------------------------------------------------------- submission

    def submit(self, block: Block) -> Submission:
        """Validate ``block`` and queue it per its composition; raises ``PlanError`` if it is invalid.

        A block that would take its source past ``MAX_LIVE_BLOCKS`` blocks or ``MAX_LIVE_BEHAVIORS``
        behaviors waiting or running is refused (unless it replaces them), before any validation work: what
        one chunk decides stays bounded.
        """
        self._check_closed()
        if block.composition != "replace":
            held = [e.block for e in self._entries if e.block.source == block.source]
            behaviors = sum(len(b.behaviors) for b in held) + len(block.behaviors)
            if len(held) >= MAX_LIVE_BLOCKS or behaviors > MAX_LIVE_BEHAVIORS:
                return Submission(
                    block.id,
                    False,
                    f"{block.source} has too much waiting or running (at most {MAX_LIVE_BLOCKS} blocks "
                    f"and {MAX_LIVE_BEHAVIORS} behaviors); try again when some have ended",
                )
        block = validate_block(block, self.manifest)
        for cause in causes_of(block):
            self._causes[cause] = None
            if len(self._causes) > RECENT_CAUSES:
                del self._causes[next(iter(self._causes))]
        if not block.id or any(e.block.id == block.id for e in self._entries):
            block = msgspec.structs.replace(block, id=f"{block.source}-{self._counter + 1}")
        self._counter += 1
        entry = Entry(block=block, seq=self._counter, submitted=self._last_k + 1, after=set())
        if block.epoch < self._epochs[block.source]:
            self._publish_plan(BlockDropped, entry, reason="stale")
            self._unshown(entry, "stale")
            return Submission(block.id, False, f"stale epoch {block.epoch} < {self._epochs[block.source]}")
        same = [e for e in self._entries if e.block.source == block.source]
        if block.composition == "replace":
            for other in same:
                if other.start is None:
                    self._drop(other, "replaced")
                else:
                    self._interrupt(other, "replaced")
        elif block.composition == "append":
            mine = block.channels()
            entry.after = {e.block.id for e in same if e.block.channels() & mine}
        self._entries.append(entry)
        speech = next((b for b in block.behaviors if isinstance(b, Speech)), None)
        if speech is not None:
            for listener in self._speech_listeners:
                listener(speech.text)
        return Submission(block.id, True, after=tuple(sorted(entry.after)))

    def open_speech(self, block: Block) -> Submission:
        """``submit`` a block of one ``Speech`` whose text is only its beginning (a reply still streaming):
        it starts as any speech, but does not end, and ``started`` is not published, until
        ``extend_speech`` gives its whole text."""
        if [type(b) for b in block.behaviors] != [Speech]:
            raise ValueError("open speech is a block of one Speech behavior")
        submission = self.submit(block)
        if submission.accepted:
            self._entries[-1].open = True
        return submission

    def extend_speech(self, block_id: str, block: Block | None = None) -> Submission:
        """Close the open speech of block ``block_id``: ``block`` (its source, epoch and cause are the open
        block's) becomes that block, its ``Speech`` of the same id continuing the text spoken so far (the
        same speech id); None keeps the text as it is. Refused when the block has gone (cut, dropped,
        stale) or the text does not continue what was spoken."""
        self._check_closed()
        entry = next((e for e in self._entries if e.block.id == block_id and e.open), None)
        if entry is None:
            return Submission(block_id, False, "the speech it continues has already ended or was cut")
        (old,) = (b for b in entry.block.behaviors if isinstance(b, Speech))
        if block is not None:
            block = validate_block(
                msgspec.structs.replace(
                    block,
                    id=block_id,
                    source=entry.block.source,
                    epoch=entry.block.epoch,
                    cause=entry.block.cause,
                    also=entry.block.also,
                ),
                self.manifest,
            )
            new = next((b for b in block.behaviors if isinstance(b, Speech) and b.id == old.id), None)
            if new is None or not new.text.startswith(old.text):
                return Submission(block_id, False, "its speech does not continue what was already said")
            entry.block = block
        entry.open = False
        if entry.start is None:
            return Submission(block_id, True)  # not dispatched yet: it starts with the whole text
        voice = entry.voices.pop(old.id)
        new_speech = next(b for b in entry.block.behaviors if isinstance(b, Speech) and b.id == old.id)
        if self.voice == "estimate" and voice.start is not None and voice.duration_s is None:
            # The wait for the rest is part of the speech: the rest is said after it, not within it.
            said = max(estimate_speech_s(old.text), (self._last_k + 1 - voice.start) * self.manifest.chunk_s)
            voice.duration_s = said + estimate_speech_s(new_speech.text[len(old.text) :])
        voice.behavior, voice.open = new_speech, False
        entry.voices = {
            b.id: voice if b.id == old.id else Voice(f"{block_id}/{b.id}", b)
            for b in entry.block.behaviors
            if isinstance(b, Speech)
        }
        if voice.cued is not None and not voice.finished:
            self._extends.append(
                SpeechCue(
                    speech_id=voice.speech_id,
                    block_id=block_id,
                    source=entry.block.source,
                    text=new_speech.text,
                    emotion=new_speech.emotion,
                    estimate_s=estimate_speech_s(new_speech.text),
                    chunk=voice.cued,
                    cause=entry.block.cause,
                )
            )
        self._retime(entry)
        if voice.owed_start:
            voice.owed_start = False
            self._publish_speech(entry, voice, "started")
        return Submission(block_id, True)

    def caused(self, cause: str) -> bool:
        """Whether a block was submitted for input ``cause`` (among the last ``RECENT_CAUSES``)."""
        return cause in self._causes

    def interrupt(self, below: Source = "user", cause: str | None = None) -> list[str]:
        """Stop every block ranked below source ``below`` (speech is cut); returns their ids. The next
        chunk decided reflects ``cause`` (the interrupt event), whose effect it is."""
        self._check_closed()
        if cause:
            self._interrupts.append(cause)
        stopped = []
        for entry in list(self._entries):
            if SOURCE_RANK[entry.block.source] < SOURCE_RANK[below]:
                stopped.append(entry.block.id)
                if entry.start is None:
                    self._drop(entry, "interrupted")
                else:
                    self._interrupt(entry, "interrupt")
        return stopped

    def cancel(self, block_id: str) -> bool:
        """Stop one block (a reflex ending its listening pose); False if it is not waiting or running."""
        for entry in self._entries:
            if entry.block.id == block_id:
                if entry.start is None:
                    self._drop(entry, "interrupted")
                else:
                    self._interrupt(entry, "interrupt")
                return True
        return False

    def snapshot(self) -> RealizerSnapshot:
        """Everything that decides the next chunks (blocks, voices, epochs, clock, position, idle schedule),
        for a story checkpoint: ``restore`` it and the same inputs give the same chunks again."""
        return RealizerSnapshot(copy.deepcopy({name: getattr(self, name) for name in SNAPSHOT_FIELDS}))

    def state(self) -> RealizerState:
        """What ``snapshot`` holds, as plain data, without copying it: it shares the realizer's own objects,
        so encode it before the realizer moves on (a handover note does, on the spot)."""
        return RealizerSnapshot({name: getattr(self, name) for name in SNAPSHOT_FIELDS}).to_state()

    def restore(self, snapshot: RealizerSnapshot) -> None:
        """Go back to a ``snapshot`` (tick listeners such as a script keep their own state). An input whose
        block was waiting and is not in the snapshot is told stale: the rewind took its only chance to show."""
        waiting = self._entry_causes() - self._reflected
        for name, value in copy.deepcopy(snapshot.state).items():
            setattr(self, name, value)
        for cause in sorted(waiting - self._entry_causes()):
            detail = "a story rewind went back before it showed"
            self._publish(self._stamp(InputUnshown, cause=cause, reason="stale", detail=detail))

    def _entry_causes(self) -> set[str]:
        """The inputs behind every block waiting or running."""
        return {cause for entry in self._entries for cause in causes_of(entry.block)}

    def blocks(self) -> list[tuple[str, str, bool]]:
        """(block id, source, running) for every block waiting or running."""
        return [(e.block.id, e.block.source, e.start is not None) for e in self._entries]

    # --------------------------------------------------------------------------- voice reports

    def speech_started(self, speech_id: str, duration_s: float | None = None, delay_s: float = 0.0) -> None:
        """The server started playing ``speech_id``; ``duration_s`` is its synthesised length, ``delay_s``
        how long after its cue chunk began the voice starts sounding (word-synchronised behaviors and
        sync points after the speech move with it)."""
        found = self._voices.get(speech_id)
        if found is None:
            return
        entry, voice = found
        retime = False
        if duration_s is not None and math.isfinite(duration_s) and duration_s > 0:
            voice.duration_s = duration_s
            retime = True
        if voice.cued is not None and math.isfinite(delay_s) and delay_s > 0:
            start = voice.cued + math.ceil(delay_s / self.manifest.chunk_s - 1e-9)
            if start != voice.start:
                voice.start = entry.fixed[voice.behavior.id] = start
                retime = True
        if retime:
            self._retime(entry)
        if self.voice == "server" and not voice.announced:
            voice.announced = True
            self._announce(entry, voice)

    def speech_audio(self, speech_id: str, envelope: Sequence[float]) -> None:
        """The voice's loudness per video frame (the manifest's fps, values in [0, 1]) from the speech start."""
        found = self._voices.get(speech_id)
        if found is not None:
            found[1].envelope = tuple(min(1.0, max(0.0, float(v))) for v in envelope)

    def speech_ended(self, speech_id: str) -> None:
        """The server played ``speech_id`` to the end."""
        found = self._voices.pop(speech_id, None)
        if found is None:
            return
        entry, voice = found
        if voice.playing and voice.start is not None:
            # Ended earlier than the realizer expected: the mouth closes now, later behaviors move up.
            voice.duration_s = max(
                self.manifest.chunk_s, (self._last_k + 1 - voice.start) * self.manifest.chunk_s
            )
            voice.finished = True
            self._retime(entry)
        if self.voice == "server":
            self._owed_start(entry, voice)
            self._publish_speech(entry, voice, "ended")

    def speech_interrupted(self, speech_id: str, heard_text: str, played_s: float | None = None) -> None:
        """The server cut ``speech_id`` after ``heard_text`` had been played (``played_s`` seconds)."""
        found = self._voices.pop(speech_id, None)
        if found is None:
            return
        entry, voice = found
        if voice.playing and voice.start is not None:
            voice.stopped_s = (
                played_s if played_s is not None else (self._last_k + 1 - voice.start) * self.manifest.chunk_s
            )
            voice.finished = True
            self._retime(entry)
        if self.voice == "server":
            self._owed_start(entry, voice)
            self._publish_speech(entry, voice, "interrupted", heard_text)

    def cut_voices(self) -> None:
        """End, as interrupted, every speech already cued to a voice: the voice playing it is gone (another
        front end took the session over), so none of it sounds from here on."""
        cut = [speech_id for speech_id, (_, voice) in self._voices.items() if voice.cued is not None]
        for speech_id in cut:
            self.speech_interrupted(speech_id, "")

    # ------------------------------------------------------------------------------------- tick

    def propose(self, k: int) -> Proposal:
        """Re-decide chunk ``k`` (the last ticked) as ``tick`` would, holding back every report and mark
        until ``commit``; ``discard`` restores the realizer. Settle it before anything else touches the
        realizer (no awaiting in between: ``submit``, ``tick`` and the rest refuse while it is open)."""
        self._check_closed()
        if k != self._last_k:
            raise ValueError(f"only the last ticked chunk {self._last_k} can be re-decided, not {k}")
        before = copy.deepcopy({name: getattr(self, name) for name in SNAPSHOT_FIELDS})
        self._held = []
        try:
            output = self.tick(k)
        except BaseException:
            self._restore_fields(before)
            raise
        finally:
            held, self._held = self._held, None
        self._open = Proposal(output, before, held)
        return self._open

    def commit(self, proposal: Proposal) -> ChunkOutput:
        """Make ``proposal`` the decision of its chunk: what it reported is published now."""
        self._settle(proposal)
        for event in proposal._held:
            self._publish(event)
        return proposal.output

    def discard(self, proposal: Proposal) -> None:
        """Forget ``proposal``: the realizer is as it was before it, nothing it reported is published."""
        self._settle(proposal)
        self._restore_fields(proposal._before)

    def _settle(self, proposal: Proposal) -> None:
        if self._open is not proposal:
            raise RuntimeError("this proposal is not the open one (already committed or discarded)")
        self._open = None

    def _check_closed(self) -> None:
        if self._open is not None:
            raise RuntimeError("a re-decision is open: commit or discard it first")

    def _restore_fields(self, state: dict[str, object]) -> None:
        for name, value in state.items():
            setattr(self, name, value)

    def tick(self, k: int) -> ChunkOutput:
        """Decide chunk ``k``. Call once per chunk in order; calling again with the same ``k`` (to
        regenerate a chunk in flight) re-decides it with the blocks submitted since, without repeating
        effects already reported (prefer ``propose`` for that: it can be taken back)."""
        self._check_closed()
        if k < self._last_k:
            raise ValueError(f"chunk {k} is before the last ticked chunk {self._last_k}")
        first = k != self._last_k
        if first:
            self._position_before = self.position
            self._scene_before = dict(self.scene)
        else:
            self.position = self._position_before
            self.scene = dict(self._scene_before)
        self._last_k = k
        if first:
            # A re-decision of the same chunk does not run the listeners again: they have had chunk k.
            for listener in self._listeners:
                listener(k)
        self._dispatch(k)
        cues: list[SpeechCue] = []
        owners, winners = self._arbitrate(k, cues)
        stops = tuple(dict.fromkeys(self._stops))
        self._stops.clear()
        extends = tuple(self._extends)
        self._extends = []
        condition, scene = self._condition(k, winners)
        reflects = [c for c in dict.fromkeys(self._interrupts) if c not in self._reflected]
        self._reflected.update(reflects)
        self._interrupts = []
        for entry in self._entries:
            if not entry.reflected and entry.block.id in owners.values():
                entry.reflected = True
                for cause in causes_of(entry.block):
                    if cause not in self._reflected:
                        self._reflected.add(cause)
                        reflects.append(cause)
        self._strokes(k)
        self.locks = owners
        return ChunkOutput(
            chunk=k,
            condition=condition,
            speech_start=tuple(cues),
            speech_stop=stops,
            scene_events=scene,
            reflects=tuple(reflects),
            owners=owners,
            speech_extend=extends,
        )

    def _dispatch(self, k: int) -> None:
        """End finished speech and blocks, then start waiting blocks whose time has come (stale ones die)."""
        for entry, voice in list(self._voices.values()):
            if voice.open:
                continue  # more text is coming: it ends once it is whole
            if voice.playing and (entry not in self._entries or k >= self._span(entry, voice.behavior)[1]):
                self._finish_voice(entry, voice)
        for entry in [e for e in self._entries if e.start is not None]:
            for voice in entry.voices.values():
                waited = k - self._span(entry, voice.behavior)[0]
                if (
                    voice.start is None
                    and not voice.finished
                    and waited * self.manifest.chunk_s > SPEECH_WAIT_S
                ):
                    # The voice stayed taken: this speech is given up, and reported as never heard.
                    voice.finished = True
                    self._voices.pop(voice.speech_id, None)
                    self._publish_speech(entry, voice, "interrupted", "")
            if k >= self._end_chunk(entry) and all(v.finished for v in entry.voices.values()):
                self._entries.remove(entry)
                for voice in entry.voices.values():
                    voice.finished = True
                self._publish_plan(BlockEnded, entry)
                self._unshown(entry, "outranked")
        waiting_ids = {e.block.id for e in self._entries}
        for entry in [e for e in self._entries if e.start is None]:
            block = entry.block
            if block.epoch < self._epochs[block.source]:
                self._drop(entry, "stale")
            elif (
                block.expires_s is not None
                and (k - entry.submitted) * self.manifest.chunk_s > block.expires_s
            ):
                self._drop(entry, "expired")
            elif not (entry.after & waiting_ids):
                entry.start = k
                entry.position = self.position
                entry.voices = {
                    b.id: Voice(f"{block.id}/{b.id}", b, open=entry.open)
                    for b in block.behaviors
                    if isinstance(b, Speech)
                }
                for voice in entry.voices.values():
                    self._voices[voice.speech_id] = (entry, voice)
                self._retime(entry)
                self._publish_plan(BlockStarted, entry)

    def _retime(self, entry: Entry) -> None:
        """Resolve the block's timings again (new speech facts, speech started late); started behaviors
        stay where they are."""
        assert entry.start is not None
        facts = {
            bid: SpeechFacts(duration_s=v.duration_s, stopped_s=v.stopped_s)
            for bid, v in entry.voices.items()
        }
        pinned = {bid: (chunk - entry.start) * self.manifest.chunk_s for bid, chunk in entry.fixed.items()}
        entry.timings, entry.shift = resolve_pinned(
            entry.block, facts, entry.position, pinned, entry.shift, chunk_s=self.manifest.chunk_s
        )

    def _start_chunk(self, entry: Entry, b: Behavior) -> int:
        """The chunk behavior ``b`` starts in: started behaviors keep their start chunk."""
        assert entry.start is not None
        return entry.fixed.get(b.id, entry.start + round(entry.timings[b.id].start / self.manifest.chunk_s))

    def _span(self, entry: Entry, b: Behavior, block_end: int | None = None) -> tuple[int, int]:
        """Chunks [start, end) of behavior ``b``; ``block_end`` is ``_end_chunk(entry)`` when the caller has
        it (a behavior that lasts until the block ends needs it, and it costs a pass over the block)."""
        assert entry.start is not None
        t = entry.timings[b.id]
        start = self._start_chunk(entry, b)
        if isinstance(b, Speech):
            voice = entry.voices[b.id]
            length = voice.stopped_s if voice.stopped_s is not None else voice.duration_s
            if length is None:
                length = estimate_speech_s(b.text)
            end = start + max(1, math.ceil(length / self.manifest.chunk_s - 1e-9))
            if voice.open and not voice.finished:
                end = max(end, self._last_k + 2)  # it lasts at least as long as its text is still coming
            return start, end
        if t.end is None:
            return start, self._end_chunk(entry) if block_end is None else block_end
        return start, max(start + 1, entry.start + round(t.end / self.manifest.chunk_s))

    def _end_chunk(self, entry: Entry) -> int:
        assert entry.start is not None
        end = entry.start + max(
            1, round(block_length_s(entry.timings, self.manifest.chunk_s) / self.manifest.chunk_s)
        )
        for b in entry.block.behaviors:
            if isinstance(b, Speech) or (b.id in entry.fixed and entry.timings[b.id].end is not None):
                end = max(end, self._span(entry, b)[1])
        return end

    def _arbitrate(
        self, k: int, cues: list[SpeechCue]
    ) -> tuple[dict[str, str], dict[str, tuple[Entry, Behavior | None]]]:
        """Give each channel to its best claim in chunk ``k``; start won speech, cut outranked speech."""
        claims: dict[Channel, list[tuple[tuple[int, int, int, int], Entry, Behavior | None]]] = {}
        b: Behavior | None
        for entry in self._entries:
            if entry.start is None:
                continue
            rank = entry.rank
            for channel in entry.block.locks:
                claims.setdefault(channel, []).append(((*rank, -1), entry, None))
            block_end = self._end_chunk(entry)  # once per block, not once per behavior
            for b in entry.block.behaviors:
                start, end = self._span(entry, b, block_end)
                voice = entry.voices.get(b.id)
                if voice is not None and voice.start is None:
                    # Speech not yet started keeps claiming until the voice is free, then starts late.
                    if start > k or voice.finished:
                        continue
                elif voice is not None and not voice.playing:
                    continue
                elif not start <= k < end:
                    continue
                for channel in behavior_channels(b):
                    claims.setdefault(channel, []).append(((*rank, start), entry, b))
        winners: dict[str, tuple[Entry, Behavior | None]] = {}
        for channel, options in claims.items():
            _, entry, b = max(options, key=lambda o: o[0])
            winners[channel] = (entry, b)
        voice_winner = winners.get("voice", (None, None))[1]
        for entry, voice in list(self._voices.values()):
            if voice.playing and voice.behavior is not voice_winner:
                self._cut_voice(entry, voice, k)
        if isinstance(voice_winner, Speech):
            entry = winners["voice"][0]
            voice = entry.voices[voice_winner.id]
            if voice.start is None:
                voice.start = voice.cued = k
                entry.fixed[voice_winner.id] = k
                self._retime(entry)
                cues.append(
                    SpeechCue(
                        speech_id=voice.speech_id,
                        block_id=entry.block.id,
                        source=entry.block.source,
                        text=voice_winner.text,
                        emotion=voice_winner.emotion,
                        estimate_s=estimate_speech_s(voice_winner.text),
                        chunk=k,
                        cause=entry.block.cause,
                        open=voice.open,
                    )
                )
                if self.voice == "estimate":
                    self._announce(entry, voice)
        for entry, b in winners.values():
            if b is not None and b.id not in entry.fixed:
                entry.fixed[b.id] = self._start_chunk(entry, b)
        owners = {channel: entry.block.id for channel, (entry, _) in winners.items()}
        return owners, winners

    def _finish_voice(self, entry: Entry, voice: Voice) -> None:
        """Speech reached its end (estimate mode reports it; the server reports its own)."""
        voice.finished = True
        if self.voice == "estimate":
            del self._voices[voice.speech_id]
            self._publish_speech(entry, voice, "ended")

    def _cut_voice(self, entry: Entry, voice: Voice, k: int) -> None:
        """Speech lost the voice before its end: stop it (it cannot resume)."""
        assert voice.start is not None
        self._stops.append(voice.speech_id)
        voice.stopped_s = max(0.0, (k - voice.start) * self.manifest.chunk_s)
        voice.finished = True
        if self.voice == "estimate":
            del self._voices[voice.speech_id]
            duration = voice.duration_s or estimate_speech_s(voice.behavior.text)
            heard = heard_prefix(voice.behavior.text, duration, voice.stopped_s)
            self._owed_start(entry, voice)
            self._publish_speech(entry, voice, "interrupted", heard)
        if entry in self._entries:
            self._retime(entry)

    def _condition(
        self, k: int, winners: dict[str, tuple[Entry, Behavior | None]]
    ) -> tuple[ChunkCondition, tuple[str, ...]]:
        idle = self.idle.at(k, self.manifest)
        action, target, paw, side = "idle", (0.0, 0.0), "right", "other"
        body = winners.get("body")
        if body is None:
            action, target = idle.action, idle.target
        else:
            b = body[1]
            if isinstance(b, Action):
                action = b.name
                paw = str(b.params.get("paw", "right"))
                side = str(b.params.get("side", "other"))
                target = (float(b.params.get("target_x", 0.0)), float(b.params.get("target_y", 0.0)))
            elif isinstance(b, Move):
                step = WALK_SPEED_PER_S * self.manifest.chunk_s
                if abs(b.x - self.position) > step / 2:
                    action = WALKS[1] if b.x > self.position else WALKS[0]
        if action in WALKS:
            step = WALK_SPEED_PER_S * self.manifest.chunk_s
            self.position = min(1.0, max(-1.0, self.position + (step if action == WALKS[1] else -step)))
        gaze_claim = winners.get("gaze")
        if gaze_claim is None:
            gaze = target if action == "look_at" else idle.gaze
        elif isinstance(gaze_claim[1], Gaze):
            gaze = (gaze_claim[1].x, gaze_claim[1].y)
        else:
            gaze = (0.0, 0.0)
        emotion = "neutral"
        face = winners.get("face")
        if face is not None and isinstance(face[1], Emotion):
            emotion = face[1].emotion
        elif face is not None and isinstance(face[1], Speech) and face[1].emotion is not None:
            emotion = face[1].emotion
        speaking = False
        audio = (0.0,) * self.manifest.frames_per_chunk
        voice_claim = winners.get("voice")
        if voice_claim is not None and isinstance(voice_claim[1], Speech):
            voice = voice_claim[0].voices[voice_claim[1].id]
            speaking = True
            audio = self._envelope(voice, k)
        scene: tuple[str, ...] = ()
        scene_claim = winners.get("scene")
        if scene_claim is not None and isinstance(scene_claim[1], SceneEvent):
            if self._start_chunk(scene_claim[0], scene_claim[1]) == k:
                scene = (scene_claim[1].name,)
        # Every scene change due now applies, whoever holds the scene channel: the parts are state, not a
        # contested channel (of two changes to one part in a chunk, the later block's wins).
        for entry in self._entries:
            if entry.start is not None:
                for b in entry.block.behaviors:
                    if isinstance(b, SetScene) and self._start_chunk(entry, b) == k:
                        self.scene.update(b.changes)
        # An action toward the scene may set part of it (opening the door leaves it open).
        self.scene.update(self._sets.get(action, {}))
        condition = ChunkCondition(
            action=action,
            target=target,
            gaze=gaze,
            paw=paw,
            side=side,
            emotion=emotion,
            speaking=speaking,
            audio=audio,
            scene=tuple(self.scene.items()),
        )
        return condition, scene

    def _envelope(self, voice: Voice, k: int) -> tuple[float, ...]:
        """The voice's loudness for chunk k's frames: reported by the server, or a syllable-like guess."""
        assert voice.start is not None
        n, fps = self.manifest.frames_per_chunk, self.manifest.fps
        first = (k - voice.start) * n
        if voice.envelope:
            values = voice.envelope[first : first + n]
            return tuple(values) + (0.0,) * (n - len(values))
        # About four syllables a second: the mouth opens and closes rather than hanging open.
        return tuple(
            round(0.55 + 0.4 * math.sin(2 * math.pi * 4.0 * (first + i) / fps + 0.7), 3) for i in range(n)
        )

    def _strokes(self, k: int) -> None:
        for entry in self._entries:
            if entry.start is None:
                continue
            for b in entry.block.behaviors:
                if isinstance(b, Action | Move) and b.id not in entry.strokes:
                    start = self._start_chunk(entry, b)
                    stroke = start + round(
                        (entry.timings[b.id].stroke - entry.timings[b.id].start) / self.manifest.chunk_s
                    )
                    if k >= stroke:
                        entry.strokes.add(b.id)
                        name = b.name if isinstance(b, Action) else "move"
                        self._publish_plan(StrokeReached, entry, behavior=b.id, action=name)

    # ---------------------------------------------------------------------------------- endings

    def _drop(self, entry: Entry, reason: Literal["stale", "expired", "replaced", "interrupted"]) -> None:
        self._entries.remove(entry)
        self._publish_plan(BlockDropped, entry, reason=reason)
        self._unshown(entry, reason)

    def _interrupt(self, entry: Entry, reason: Literal["interrupt", "replaced", "stale"]) -> None:
        self._entries.remove(entry)
        for voice in entry.voices.values():
            if voice.playing:
                self._cut_voice(entry, voice, self._last_k + 1)
        self._publish_plan(BlockInterrupted, entry, reason=reason)
        self._unshown(entry, reason)

    def _unshown(self, entry: Entry, reason: UnshownReason) -> None:
        """``entry`` has left: for each of its causes that never showed, if it was the cause's last block,
        say so."""
        detail = f"{entry.block.source} block {entry.block.label or entry.block.id!r} {reason}"
        for cause in causes_of(entry.block):
            if cause in self._reflected or any(cause in causes_of(e.block) for e in self._entries):
                continue
            self._publish(self._stamp(InputUnshown, cause=cause, reason=reason, detail=detail))

    # -------------------------------------------------------------------------------- publishing

    def _publish(self, event: Event) -> None:
        if self._held is not None:
            self._held.append(event)
        elif self.bus is not None:
            self.bus.publish_nowait(event)

    def _publish_plan(self, kind: type[Event], entry: Entry, **fields: Any) -> None:
        block = entry.block
        self._publish(
            self._stamp(
                kind,
                block_id=block.id,
                source=block.source,
                epoch=block.epoch,
                chunk=max(self._last_k, 0),
                label=block.label,
                **fields,
            )
        )

    def _announce(self, entry: Entry, voice: Voice) -> None:
        """``started``, now or, for open speech, once its whole text is known."""
        if voice.open:
            voice.owed_start = True
        else:
            self._publish_speech(entry, voice, "started")

    def _owed_start(self, entry: Entry, voice: Voice) -> None:
        """Speech that ends or is cut while still open: its held ``started`` goes first."""
        if voice.owed_start:
            voice.owed_start = False
            self._publish_speech(entry, voice, "started")

    def _publish_speech(
        self,
        entry: Entry,
        voice: Voice,
        state: Literal["started", "ended", "interrupted"],
        heard_text: str | None = None,
    ) -> None:
        self._publish(
            self._stamp(
                CharacterSpeech,
                speech_id=voice.speech_id,
                block_id=entry.block.id,
                source=entry.block.source,
                text=voice.behavior.text,
                state=state,
                heard_text=voice.behavior.text if state == "ended" else heard_text,
                chunk=max(self._last_k, 0),
            )
        )
