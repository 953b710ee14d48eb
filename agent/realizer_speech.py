"""The realizer's speech bookkeeping: cueing speech that won the voice, extending open speech, taking the
voice's reports, and ending, cutting or giving up speech, each with its ``CharacterSpeech`` event (the
server's voice reports when speech ends or is cut; without one, the estimate says so as the chunks pass).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from typing import Literal

import msgspec

from agent.plan_checks import validate_block
from agent.plans import Block, Speech
from agent.realizer_outputs import SpeechCue, Submission
from agent.realizer_reports import Reporter
from agent.realizer_state import Entry, Voice
from agent.realizer_timing import Timeline
from agent.speech_timing import estimate_speech_s, heard_prefix
from streaming_model.manifest import Manifest

VoiceReports = Literal["estimate", "server"]

SPEECH_WAIT_S = 10.0
"""How long speech waits for a voice held by a higher source before it is given up."""

VoiceRegistry = dict[str, tuple[Entry, Voice]]
"""Speech id -> its block entry and voice: every speech started and not yet reported over (the realizer's
own, which its snapshots hold)."""


class Speaker:
    """Keeps one realizer's speech: ``mode`` says who reports it; ``clock`` gives the last chunk ticked."""

    def __init__(
        self,
        mode: VoiceReports,
        manifest: Manifest,
        timeline: Timeline,
        reporter: Reporter,
        clock: Callable[[], int],
    ) -> None:
        self.mode = mode
        self.manifest = manifest
        self._timeline = timeline
        self._reporter = reporter
        self._clock = clock

    # ------------------------------------------------------------------------ on the chunk clock

    def give_voices(self, voices: VoiceRegistry, entry: Entry) -> None:
        """``entry``'s block starts: a voice for each of its speeches, in ``voices`` from now on."""
        entry.voices = {
            b.id: Voice(f"{entry.block.id}/{b.id}", b, open=entry.open)
            for b in entry.block.behaviors
            if isinstance(b, Speech)
        }
        for voice in entry.voices.values():
            voices[voice.speech_id] = (entry, voice)

    def cue(self, entry: Entry, speech: Speech, k: int) -> SpeechCue:
        """``speech`` of ``entry``, not started yet, won the voice in chunk ``k`` and starts there: the cue
        the chunk output carries."""
        voice = entry.voices[speech.id]
        voice.start = voice.cued = k
        entry.fixed[speech.id] = k
        self._timeline.retime(entry)
        cue = _speech_cue(entry, voice, speech, k)
        if self.mode == "estimate":
            self._announce(entry, voice)
        return cue

    def end_due(self, voices: VoiceRegistry, running: Collection[Entry], k: int) -> None:
        """End the speech that is over by chunk ``k`` (its block gone, or its span passed), unless open."""
        for entry, voice in list(voices.values()):
            if voice.open:
                continue  # more text is coming: it ends once it is whole
            if voice.playing and (entry not in running or k >= self._timeline.span(entry, voice.behavior)[1]):
                self._finish(voices, entry, voice)

    def give_up(self, voices: VoiceRegistry, entry: Entry, k: int) -> None:
        """Give up ``entry``'s speech that has waited for a taken voice over ``SPEECH_WAIT_S`` by chunk k."""
        for voice in entry.voices.values():
            waited = k - self._timeline.span(entry, voice.behavior)[0]
            if voice.start is None and not voice.finished and waited * self.manifest.chunk_s > SPEECH_WAIT_S:
                # The voice stayed taken: this speech is given up, and reported as never heard.
                voice.finished = True
                voices.pop(voice.speech_id, None)
                self._reporter.speech(entry, voice, "interrupted", "")

    def _finish(self, voices: VoiceRegistry, entry: Entry, voice: Voice) -> None:
        """Speech reached its end (estimate mode reports it; the server reports its own)."""
        voice.finished = True
        if self.mode == "estimate":
            del voices[voice.speech_id]
            self._reporter.speech(entry, voice, "ended")

    def cut(self, voices: VoiceRegistry, entry: Entry, voice: Voice, k: int, *, running: bool) -> None:
        """Speech lost the voice before its end, in chunk ``k``: stop it (it cannot resume). A ``running``
        block's behaviors after it move up."""
        assert voice.start is not None
        voice.stopped_s = max(0.0, (k - voice.start) * self.manifest.chunk_s)
        voice.finished = True
        if self.mode == "estimate":
            del voices[voice.speech_id]
            duration = voice.duration_s or estimate_speech_s(voice.behavior.text)
            heard = heard_prefix(voice.behavior.text, duration, voice.stopped_s)
            self._owed_start(entry, voice)
            self._reporter.speech(entry, voice, "interrupted", heard)
        if running:
            self._timeline.retime(entry)

    # -------------------------------------------------------------------------------- open speech

    def extend(self, entry: Entry, block: Block | None, extends: list[SpeechCue]) -> Submission:
        """Close the open speech of ``entry`` with ``block`` (see ``Realizer.extend_speech``); the
        extension's cue goes to ``extends`` when the speech was cued and still plays."""
        block_id = entry.block.id
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
        self._carry_on(entry, old, extends)
        return Submission(block_id, True)

    def _carry_on(self, entry: Entry, old: Speech, extends: list[SpeechCue]) -> None:
        """The open speech ``old`` of running ``entry`` now has its whole text (``entry.block`` holds it):
        its voice carries on with it (the same speech id)."""
        voice = entry.voices.pop(old.id)
        new_speech = next(b for b in entry.block.behaviors if isinstance(b, Speech) and b.id == old.id)
        if self.mode == "estimate" and voice.start is not None and voice.duration_s is None:
            # The wait for the rest is part of the speech: the rest is said after it, not within it.
            said = max(estimate_speech_s(old.text), (self._clock() + 1 - voice.start) * self.manifest.chunk_s)
            voice.duration_s = said + estimate_speech_s(new_speech.text[len(old.text) :])
        voice.behavior, voice.open = new_speech, False
        entry.voices = {
            b.id: voice if b.id == old.id else Voice(f"{entry.block.id}/{b.id}", b)
            for b in entry.block.behaviors
            if isinstance(b, Speech)
        }
        if voice.cued is not None and not voice.finished:
            extends.append(_speech_cue(entry, voice, new_speech, voice.cued))  # voice.open: now False
        self._timeline.retime(entry)
        self._owed_start(entry, voice)

    # ------------------------------------------------------------------------------ voice reports

    def started(
        self, voices: VoiceRegistry, speech_id: str, duration_s: float | None, delay_s: float
    ) -> None:
        """The voice started ``speech_id`` (see ``Realizer.speech_started``)."""
        found = voices.get(speech_id)
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
            self._timeline.retime(entry)
        if self.mode == "server" and not voice.announced:
            voice.announced = True
            self._announce(entry, voice)

    def audio(self, voices: VoiceRegistry, speech_id: str, envelope: Sequence[float]) -> None:
        """The voice's loudness per frame for ``speech_id`` (see ``Realizer.speech_audio``)."""
        found = voices.get(speech_id)
        if found is not None:
            found[1].envelope = tuple(min(1.0, max(0.0, float(v))) for v in envelope)

    def ended(self, voices: VoiceRegistry, speech_id: str) -> None:
        """The voice played ``speech_id`` to the end (see ``Realizer.speech_ended``)."""
        found = voices.pop(speech_id, None)
        if found is None:
            return
        entry, voice = found
        if voice.playing and voice.start is not None:
            # Ended earlier than the realizer expected: the mouth closes now, later behaviors move up.
            chunk_s = self.manifest.chunk_s
            voice.duration_s = max(chunk_s, (self._clock() + 1 - voice.start) * chunk_s)
            voice.finished = True
            self._timeline.retime(entry)
        if self.mode == "server":
            self._owed_start(entry, voice)
            self._reporter.speech(entry, voice, "ended")

    def interrupted(
        self, voices: VoiceRegistry, speech_id: str, heard_text: str, played_s: float | None
    ) -> None:
        """The voice cut ``speech_id`` after ``heard_text`` (see ``Realizer.speech_interrupted``)."""
        found = voices.pop(speech_id, None)
        if found is None:
            return
        entry, voice = found
        if voice.playing and voice.start is not None:
            voice.stopped_s = (
                played_s
                if played_s is not None
                else (self._clock() + 1 - voice.start) * self.manifest.chunk_s
            )
            voice.finished = True
            self._timeline.retime(entry)
        if self.mode == "server":
            self._owed_start(entry, voice)
            self._reporter.speech(entry, voice, "interrupted", heard_text)

    def cut_cued(self, voices: VoiceRegistry) -> None:
        """End, as interrupted, every speech already cued (see ``Realizer.cut_voices``)."""
        cut = [speech_id for speech_id, (_, voice) in voices.items() if voice.cued is not None]
        for speech_id in cut:
            self.interrupted(voices, speech_id, "", None)

    # -------------------------------------------------------------------------------- announcing

    def _announce(self, entry: Entry, voice: Voice) -> None:
        """``started``, now or, for open speech, once its whole text is known."""
        if voice.open:
            voice.owed_start = True
        else:
            self._reporter.speech(entry, voice, "started")

    def _owed_start(self, entry: Entry, voice: Voice) -> None:
        """Speech that ends or is cut while still open: its held ``started`` goes first."""
        if voice.owed_start:
            voice.owed_start = False
            self._reporter.speech(entry, voice, "started")


def _speech_cue(entry: Entry, voice: Voice, speech: Speech, chunk: int) -> SpeechCue:
    """The cue that has the server say ``speech`` (``voice`` of ``entry``) from the start of ``chunk``."""
    return SpeechCue(
        speech_id=voice.speech_id,
        block_id=entry.block.id,
        source=entry.block.source,
        text=speech.text,
        emotion=speech.emotion,
        estimate_s=estimate_speech_s(speech.text),
        chunk=chunk,
        cause=entry.block.cause,
        open=voice.open,
    )
