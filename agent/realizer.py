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
from collections.abc import Callable, Sequence
from typing import Literal

import msgspec

from agent.bounds import MAX_LIVE_BEHAVIORS, MAX_LIVE_BLOCKS
from agent.idle import IdleVariety
from agent.plan_checks import validate_block
from agent.plans import SOURCE_RANK, Action, Block, Source, Speech
from agent.progress import (
    BlockDropped,
    BlockEnded,
    BlockInterrupted,
    BlockStarted,
    StrokeReached,
    UnshownReason,
)
from agent.realizer_arbitration import Winners, award, fix_starts
from agent.realizer_causes import RecentCauses, causes_behind, never_shown, newly_reflected
from agent.realizer_condition import Conditions
from agent.realizer_outputs import ChunkOutput, SpeechCue, Submission
from agent.realizer_redecision import Redecision
from agent.realizer_reports import Reporter
from agent.realizer_speech import Speaker, VoiceRegistry, VoiceReports
from agent.realizer_state import SNAPSHOT_FIELDS, Entry, Proposal, RealizerSnapshot, RealizerState, Voice
from agent.realizer_timing import Timeline
from events.bus import EventBus
from events.stamp import Stamper
from streaming_model.manifest import Manifest, build_manifest

TickListener = Callable[[int], None]
SpeechListener = Callable[[str, Source], None]
"""Told the first speech of a block accepted, and who submitted it (``add_speech_listener``)."""


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
        self.idle = idle or IdleVariety()
        self.position = 0.0
        """Estimated floor x of the character in [-1, 1], integrated from the walks it dispatched."""
        self.scene: dict[str, str] = {}
        """The scene's parts set so far by ``SetScene`` behaviors and actions that set one (part -> choice,
        in the order first set); a part not here is at its default. Every condition carries it."""
        self._scene_before: dict[str, str] = {}
        self.locks: dict[str, str] = {}
        """Channel -> id of the block that held it in the last chunk."""
        self._counter = 0
        self._epochs: dict[str, int] = dict.fromkeys(SOURCE_RANK, 0)
        self._entries: list[Entry] = []
        self._voices: VoiceRegistry = {}
        self._stops: list[str] = []
        self._listeners: list[TickListener] = []
        self._speech_listeners: list[SpeechListener] = []
        self._last_k = -1
        self._position_before = 0.0
        self._reflected: set[str] = set()
        self._interrupts: list[str] = []
        """Interrupt events whose effect (blocks stopped) the next chunk decided shows."""
        self._extends: list[SpeechCue] = []
        self._causes = RecentCauses()

        def clock() -> int:
            return self._last_k  # read as the clock moves (and as a restore or a discard sets it back)

        self._reporter = Reporter(bus, Stamper(session, prefix="r"), clock)
        self._timeline = Timeline(self.manifest.chunk_s, clock)
        self._speaker = Speaker(voice, self.manifest, self._timeline, self._reporter, clock)
        self._conditions = Conditions(self.manifest, self._timeline)
        self._redecision = Redecision(self._fields, self._restore_fields, self._reporter)

    @property
    def bus(self) -> EventBus | None:
        """The bus the realizer publishes its progress and speech on (None: it publishes nothing)."""
        return self._reporter.bus

    @property
    def voice(self) -> VoiceReports:
        """Who reports speech: the server's voice, or the realizer's own estimate."""
        return self._speaker.mode

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
        """Call ``listener(text, source)`` with the first speech of every block accepted and the block's
        source, as it is submitted: before a chunk cues it (the server's voice starts synthesising it
        then)."""
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
        self._redecision.check_closed()
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
        self._causes.add(block)
        if not block.id or any(e.block.id == block.id for e in self._entries):
            block = msgspec.structs.replace(block, id=f"{block.source}-{self._counter + 1}")
        self._counter += 1
        entry = Entry(block=block, seq=self._counter, submitted=self._last_k + 1, after=set())
        if block.epoch < self._epochs[block.source]:
            self._reporter.plan(BlockDropped, entry, reason="stale")
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
                listener(speech.text, block.source)
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
        self._redecision.check_closed()
        entry = next((e for e in self._entries if e.block.id == block_id and e.open), None)
        if entry is None:
            return Submission(block_id, False, "the speech it continues has already ended or was cut")
        return self._speaker.extend(entry, block, self._extends)

    def caused(self, cause: str) -> bool:
        """Whether a block was submitted for input ``cause`` (among the last ``RECENT_CAUSES``)."""
        return cause in self._causes

    def interrupt(self, below: Source = "user", cause: str | None = None) -> list[str]:
        """Stop every block ranked below source ``below`` (speech is cut); returns their ids. The next
        chunk decided reflects ``cause`` (the interrupt event), whose effect it is."""
        self._redecision.check_closed()
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
        return RealizerSnapshot(copy.deepcopy(self._fields()))

    def state(self) -> RealizerState:
        """What ``snapshot`` holds, as plain data, without copying it: it shares the realizer's own objects,
        so encode it before the realizer moves on (a handover note does, on the spot)."""
        return RealizerSnapshot(self._fields()).to_state()

    def restore(self, snapshot: RealizerSnapshot) -> None:
        """Go back to a ``snapshot`` (tick listeners such as a script keep their own state). An input whose
        block was waiting and is not in the snapshot is told stale: the rewind took its only chance to show."""
        waiting = causes_behind(self._entries) - self._reflected
        self._restore_fields(copy.deepcopy(snapshot.state))
        for cause in sorted(waiting - causes_behind(self._entries)):
            self._reporter.unshown(cause, "stale", "a story rewind went back before it showed")

    def _fields(self) -> dict[str, object]:
        """The realizer's own state that a snapshot holds (``SNAPSHOT_FIELDS``), uncopied."""
        return {name: getattr(self, name) for name in SNAPSHOT_FIELDS}

    def _restore_fields(self, state: dict[str, object]) -> None:
        for name, value in state.items():
            setattr(self, name, value)

    def blocks(self) -> list[tuple[str, str, bool]]:
        """(block id, source, running) for every block waiting or running."""
        return [(e.block.id, e.block.source, e.start is not None) for e in self._entries]

    # --------------------------------------------------------------------------- voice reports

    def speech_started(self, speech_id: str, duration_s: float | None = None, delay_s: float = 0.0) -> None:
        """The server started playing ``speech_id``; ``duration_s`` is its synthesised length, ``delay_s``
        how long after its cue chunk began the voice starts sounding (word-synchronised behaviors and
        sync points after the speech move with it)."""
        self._speaker.started(self._voices, speech_id, duration_s, delay_s)

    def speech_audio(self, speech_id: str, envelope: Sequence[float]) -> None:
        """The voice's loudness per video frame (the manifest's fps, values in [0, 1]) from the speech start."""
        self._speaker.audio(self._voices, speech_id, envelope)

    def speech_ended(self, speech_id: str) -> None:
        """The server played ``speech_id`` to the end."""
        self._speaker.ended(self._voices, speech_id)

    def speech_interrupted(self, speech_id: str, heard_text: str, played_s: float | None = None) -> None:
        """The server cut ``speech_id`` after ``heard_text`` had been played (``played_s`` seconds)."""
        self._speaker.interrupted(self._voices, speech_id, heard_text, played_s)

    def cut_voices(self) -> None:
        """End, as interrupted, every speech already cued to a voice: the voice playing it is gone (another
        front end took the session over), so none of it sounds from here on."""
        self._speaker.cut_cued(self._voices)

    # ------------------------------------------------------------------------------------- tick

    def propose(self, k: int) -> Proposal:
        """Re-decide chunk ``k`` (the last ticked) as ``tick`` would, holding back every report and mark
        until ``commit``; ``discard`` restores the realizer. Settle it before anything else touches the
        realizer (no awaiting in between: ``submit``, ``tick`` and the rest refuse while it is open)."""
        self._redecidable(k)
        return self._redecision.propose(lambda: self.tick(k))

    def foresee(self, k: int, imagine: Callable[[], object]) -> ChunkOutput:
        """Chunk ``k`` (the last ticked) as a re-decision would decide it after ``imagine`` (a reflex
        answering an input that is only expected), and nothing of it kept: the realizer is as it was before,
        nothing reported, nothing submitted."""
        self._redecidable(k)
        before, causes = copy.deepcopy(self._fields()), copy.deepcopy(self._causes)
        self._reporter.hold()
        try:
            imagine()
            return self.tick(k)
        finally:
            self._reporter.release()
            self._restore_fields(before)
            self._causes = causes

    def _redecidable(self, k: int) -> None:
        """Refuse a re-decision while one is open, or of another chunk than the last ticked."""
        self._redecision.check_closed()
        if k != self._last_k:
            raise ValueError(f"only the last ticked chunk {self._last_k} can be re-decided, not {k}")

    def commit(self, proposal: Proposal) -> ChunkOutput:
        """Make ``proposal`` the decision of its chunk: what it reported is published now."""
        return self._redecision.commit(proposal)

    def discard(self, proposal: Proposal) -> None:
        """Forget ``proposal``: the realizer is as it was before it, nothing it reported is published."""
        self._redecision.discard(proposal)

    def tick(self, k: int) -> ChunkOutput:
        """Decide chunk ``k``. Call once per chunk in order; calling again with the same ``k`` (to
        regenerate a chunk in flight) re-decides it with the blocks submitted since, without repeating
        effects already reported (prefer ``propose`` for that: it can be taken back)."""
        self._redecision.check_closed()
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
        condition, scene, self.position = self._conditions.decide(
            k, winners, self._entries, self.idle, self.position, self.scene
        )
        reflects = newly_reflected(self._interrupts, self._reflected, self._entries, owners)
        self._interrupts = []
        for entry, b in self._timeline.reach_strokes(self._entries, k):
            name = b.name if isinstance(b, Action) else "move"
            self._reporter.plan(StrokeReached, entry, behavior=b.id, action=name)
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
        self._speaker.end_due(self._voices, self._entries, k)
        for entry in [e for e in self._entries if e.start is not None]:
            self._speaker.give_up(self._voices, entry, k)
            if k >= self._timeline.end_chunk(entry) and all(v.finished for v in entry.voices.values()):
                self._entries.remove(entry)
                for voice in entry.voices.values():
                    voice.finished = True
                self._reporter.plan(BlockEnded, entry)
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
                self._speaker.give_voices(self._voices, entry)
                self._timeline.retime(entry)
                self._reporter.plan(BlockStarted, entry)

    def _arbitrate(self, k: int, cues: list[SpeechCue]) -> tuple[dict[str, str], Winners]:
        """Give each channel to its best claim in chunk ``k``; start won speech, cut outranked speech."""
        winners = award(self._entries, k, self._timeline)
        voice_winner = winners.get("voice", (None, None))[1]
        for entry, voice in list(self._voices.values()):
            if voice.playing and voice.behavior is not voice_winner:
                self._cut_voice(entry, voice, k)
        if isinstance(voice_winner, Speech):
            entry = winners["voice"][0]
            if entry.voices[voice_winner.id].start is None:
                cues.append(self._speaker.cue(entry, voice_winner, k))
        fix_starts(winners, self._timeline)
        owners = {channel: entry.block.id for channel, (entry, _) in winners.items()}
        return owners, winners

    def _cut_voice(self, entry: Entry, voice: Voice, k: int) -> None:
        """Speech lost the voice before its end: stop it (it cannot resume)."""
        self._stops.append(voice.speech_id)
        self._speaker.cut(self._voices, entry, voice, k, running=entry in self._entries)

    # ---------------------------------------------------------------------------------- endings

    def _drop(self, entry: Entry, reason: Literal["stale", "expired", "replaced", "interrupted"]) -> None:
        self._entries.remove(entry)
        self._reporter.plan(BlockDropped, entry, reason=reason)
        self._unshown(entry, reason)

    def _interrupt(self, entry: Entry, reason: Literal["interrupt", "replaced", "stale"]) -> None:
        self._entries.remove(entry)
        for voice in entry.voices.values():
            if voice.playing:
                self._cut_voice(entry, voice, self._last_k + 1)
        self._reporter.plan(BlockInterrupted, entry, reason=reason)
        self._unshown(entry, reason)

    def _unshown(self, entry: Entry, reason: UnshownReason) -> None:
        """``entry`` has left: for each of its causes that never showed, if it was the cause's last block,
        say so."""
        detail = f"{entry.block.source} block {entry.block.label or entry.block.id!r} {reason}"
        for cause in never_shown(entry, self._reflected, self._entries):
            self._reporter.unshown(cause, reason, detail)
