"""The character's speech in a live session: synthesis, per-frame audio slices, the mouth, interruption.

The realizer decides when speech starts (a ``SpeechCue`` in a chunk's output). Audio is sliced per video
frame on the realizer's manifest's clock: rate/fps samples a frame. The player synthesises it
sentence by sentence in the background (Piper runs about 20x faster than real time, so it stays ahead of
playback), and the mouth of every chunk follows the voice's real loudness envelope. A chunk's decision
waits for the audio of its frames (with ``on_time``, only until waiting longer would make the chunk late:
``envelope``), so the part it will wait for next (the first sentence, or any part
when less than ``URGENT_AHEAD_S`` of audio is ready beyond the frames decided) is synthesised at the
video's priority; the rest below it (``Voice.synthesize_async``).
It reports to the realizer what the voice really did: the envelope, the length, the end, and on an
interruption the words that were actually played (``heard_text``); the realizer publishes them as
``character.speech`` events, which the Director's memory and the client both read. It traces the cue and
the first sentence synthesised under the cue's cause (``events.tracing``).

``SpeechConfig`` holds the switches that trade exactness for an earlier first sound (and ``redirects``,
which lets the Director's speech into a chunk already decided once its first audio is ready):
``first_clause`` synthesises a first sentence's first clause (up to its first comma) on its own, as
Piper's time grows with the text; ``start`` says where cued speech begins (see ``Decider``):
``cue_chunk`` with the chunk that cued it or ``next_chunk`` a chunk after it, the mouth waiting for the
audio either way (the same inputs give the same frames), ``when_ready`` from the first frame not yet
sent once its audio is there (where it starts, and so the frames, then depend on how fast Piper ran), or
``on_time`` as ``cue_chunk`` while the audio is ready in time for each chunk; else the voice starts when
ready or pauses until it is (no chunk waits past its deadline for the voice; the frames depend on
Piper's speed only when it is late).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import msgspec
import numpy as np

from agent.plans import Source
from agent.realizer import Realizer, SpeechCue
from events.tracing import SPEECH_CUED, SPEECH_SYNTHESISED, Tracer
from server.media import MediaClock
from server.voice import Utterance, Voice

VoiceStart = Literal["cue_chunk", "next_chunk", "when_ready", "on_time"]

_CLAUSE = re.compile(r"(?<=,)\s+")

URGENT_AHEAD_S = 1.0
"""A part is synthesised at the video's priority when less audio than this is ready beyond the frames
already decided: a chunk's mouth will soon wait for it. At the background priority a long sentence took
150-390 ms on the loaded soak machine, and the decisions that waited for it made chunks late."""


REST_SYNTHESIS_S = 0.3
"""The rest of a streamed reply starts no sooner than the first chunk this long after the decision that
took it: Piper's time for its first part, which that chunk's decision waits for. One chunk (167 ms at
24 fps) was too short on the loaded soak machine: after a short first sentence ("Sure."), the decisions
that took the rest waited 110-280 ms for it, and their chunks were late."""

PREPARED_MAX = 4
"""First parts synthesised ahead of their cue that are kept for it; an older one goes (a block outranked
before it spoke)."""


class SpeechConfig(msgspec.Struct, frozen=True, kw_only=True):
    """How the server's voice starts: ``[server] voice_start``, ``voice_first_clause`` and
    ``voice_redirects``. These defaults are the plain path (whole sentences, from the chunk that cues
    them); ``onstage serve`` takes the ``[server]`` table's."""

    start: VoiceStart = "cue_chunk"
    first_clause: bool = False
    redirects: bool = False
    """The Director's speech, once its first part is synthesised, is an urgent input (``on_ready``): it
    may regenerate the chunk in flight or a generated one not yet sent, as a gesture does, instead of
    waiting for the next chunk's decision. Where it starts then depends on Piper's speed as well as on
    when the LLM answered; speech from the user, a script or a story is never moved (their frames stay
    the same for the same inputs)."""


EARLY_SOURCES: frozenset[Source] = frozenset({"director"})
"""Whose speech ``SpeechConfig.redirects`` lets into a chunk already decided: the Director's, whose timing
is the LLM's (never the same twice), unlike the inputs the determinism guarantee covers."""


def speech_parts(sentences: list[str], first_clause: bool) -> list[str]:
    """The texts synthesis goes through in order: the sentences, the first one split after its first
    comma when ``first_clause`` (and both sides hold a word), so the first audio is ready sooner."""
    if not first_clause or not sentences:
        return list(sentences)
    head, *tail = _CLAUSE.split(sentences[0], maxsplit=1)
    if not tail or not Voice.sentences(head) or not Voice.sentences(tail[0]):
        return list(sentences)
    return [head, tail[0], *sentences[1:]]


@dataclass
class _Speaking:
    cue: SpeechCue
    cue_frame: int  # the first frame of the chunk that cued it
    start_frame: int
    utterance: Utterance | None  # None until the first sentence is synthesised
    sentences_left: list[str]
    open: bool = False
    """More text is coming (``SpeechCue.open``): running out of audio is a pause, not the end."""
    waits: bool = True
    """The mouth waits for the audio of the frames it is asked for (``cue_chunk``, ``next_chunk``);
    without, frames decided before the first audio was ready keep the mouth closed and the voice starts
    later."""
    urgent: int = 1
    """Parts of the first sentence still to synthesise at the video's priority: the mouth of the chunk
    after the cue waits for them (one, or two with its first clause apart)."""
    done: bool = False
    task: asyncio.Task[None] | None = field(default=None, repr=False)
    progress: asyncio.Event = field(default_factory=asyncio.Event, repr=False)
    """Set whenever a sentence is ready, synthesis ends, or the speech is cut."""


class SpeechPlayer:
    """Plays one voice at a time for one session, on the session's global frame counter."""

    def __init__(
        self,
        voice: Voice,
        realizer: Realizer,
        tracer: Tracer | None = None,
        config: SpeechConfig | None = None,
    ) -> None:
        self.voice = voice
        self.config = config or SpeechConfig()
        self.realizer = realizer
        self.tracer = tracer
        self.clock = MediaClock.of(realizer.manifest)
        self.per_frame = self.clock.samples_per_frame(voice.rate)
        self._now: _Speaking | None = None
        self._decided = 0  # the first global frame whose chunk's mouth is not decided yet
        self.overdue = 0
        """Chunks decided without their voice's audio, not ready by their deadline (``envelope``)."""
        self._prepared: dict[str, asyncio.Task[Utterance]] = {}
        self.on_ready: Callable[[], None] | None = None
        """Called when the first part of speech from ``EARLY_SOURCES`` is synthesised before any chunk
        cued it, with ``config.redirects`` (the session's urgent inputs set it)."""
        realizer.add_speech_listener(self.prepare)

    def prepare(self, text: str, source: Source) -> None:
        """Start synthesising the first part of speech ``text`` (submitted by ``source``) now, as it is
        submitted, rather than when a chunk cues it (up to a chunk later, and that chunk's decision waits
        for it). The same part gives the same audio whenever it is made, so the frames do not change; only
        the wait shortens (and, with ``config.redirects``, the Director's speech may start a chunk sooner)."""
        parts = self._parts(text)
        if not parts or parts[0] in self._prepared:
            return
        try:
            job = asyncio.get_running_loop().create_task(self.voice.synthesize_async(parts[0], first=True))
        except RuntimeError:  # submitted from outside the session's loop: synthesised when cued
            return
        self._prepared[parts[0]] = job
        if self.config.redirects and source in EARLY_SOURCES:
            job.add_done_callback(functools.partial(self._ready, parts[0]))
        while len(self._prepared) > PREPARED_MAX:
            self._prepared.pop(next(iter(self._prepared))).cancel()

    def _ready(self, part: str, job: asyncio.Task[Utterance]) -> None:
        """A prepared first part is synthesised: tell ``on_ready`` if no chunk has cued it yet (a cue takes
        it from ``_prepared``; a decision that cued it waited for it already)."""
        if self._prepared.get(part) is job and not job.cancelled() and job.exception() is None:
            if self.on_ready is not None:
                self.on_ready()

    def _parts(self, text: str) -> list[str]:
        """What synthesis goes through for ``text``, in order (``speech_parts`` under this config)."""
        return speech_parts(self.voice.sentences(text), self.config.first_clause)

    @property
    def speaking(self) -> bool:
        return self._now is not None

    @property
    def cause(self) -> str | None:
        """The input the voice playing now answers (None when silent or uncaused)."""
        return self._now.cue.cause if self._now is not None else None

    def start(
        self, cue: SpeechCue, start_frame: int, cue_frame: int | None = None, *, wait: bool = True
    ) -> None:
        """Begin ``cue`` at global frame ``start_frame``; cuts whatever was playing. ``cue_frame`` is the
        first frame of the chunk that cued it (default: ``start_frame``): the realizer learns the delay.

        Synthesis runs in the background. With ``wait`` (the conductor's ``cue_chunk`` and ``next_chunk``)
        the mouth of a chunk waits for its audio, so what it does never depends on synthesis speed. Should the voice still be late at send time, or without ``wait``, it starts with
        the first frame it is ready for instead of losing its beginning.
        """
        if self._now is not None:
            self.interrupt(start_frame)
        whole = self.voice.sentences(cue.text)
        sentences = speech_parts(whole, self.config.first_clause)
        if not sentences:
            self.realizer.speech_ended(cue.speech_id)
            return
        now = _Speaking(
            cue,
            start_frame if cue_frame is None else cue_frame,
            start_frame,
            None,
            sentences,
            open=cue.open,
            waits=wait,
            urgent=len(sentences) - len(whole) + 1,
        )
        self._now = now
        self._trace(cue, SPEECH_CUED)
        now.task = asyncio.create_task(self._synthesize(now))

    def extend(self, cue: SpeechCue, chunk: int) -> None:
        """Open speech playing now gets its whole text (``cue.text`` continues the text cued before), in
        the decision of ``chunk``: the rest is synthesised after what is there (its first sentence split
        as a cue's is). If the voice has run out by then, or will before the first frame of the first
        chunk decided at least ``REST_SYNTHESIS_S`` after ``chunk``, the rest starts there, the frames
        before it silent: synthesis has that long to get it ready, and that decision rarely waits.
        Where it starts depends only on the chunk the text came in, so the frames stay the same."""
        now = self._now
        if now is None or now.cue.speech_id != cue.speech_id or not now.open:
            return  # it ended or was cut meanwhile
        rest = cue.text[len(now.cue.text) :] if cue.text.startswith(now.cue.text) else ""
        now.cue, now.open = cue, False
        now.sentences_left += self._parts(rest)
        frame = self.clock.first_frame(chunk + math.ceil(REST_SYNTHESIS_S / self.clock.chunk_s - 1e-9))
        if now.done:
            self._pause(now, (frame - now.start_frame) * self.per_frame)
        if now.done and now.sentences_left:
            now.done = False
            now.task = asyncio.create_task(self._synthesize(now))
        elif now.done:
            now.progress.set()

    async def _synthesize(self, now: _Speaking) -> None:
        try:
            while now.sentences_left and self._now is now:
                urgent = now.urgent > 0 or self._ahead_s(now) < URGENT_AHEAD_S
                text = now.sentences_left.pop(0)
                prepared = self._prepared.pop(text, None)
                part = await (prepared or self.voice.synthesize_async(text, first=urgent))
                now.urgent -= 1
                if self._now is not now:
                    return
                if now.utterance is None:
                    self._trace(now.cue, SPEECH_SYNTHESISED)
                now.utterance = part if now.utterance is None else now.utterance.then(part)
                self._report_audio(now, estimate=bool(now.sentences_left))
                now.progress.set()
        finally:
            now.done = True
            now.progress.set()

    def _ahead_s(self, now: _Speaking) -> float:
        """Seconds of audio ready beyond the frames whose mouths are decided (0 before the first)."""
        if now.utterance is None:
            return 0.0
        end = now.start_frame * self.per_frame + now.utterance.samples.size
        return (end - self._decided * self.per_frame) / self.voice.rate

    def _trace(self, cue: SpeechCue, stage: str) -> None:
        if self.tracer is not None and cue.cause is not None:
            self.tracer.record(cue.cause, stage)

    def _report_audio(self, now: _Speaking, estimate: bool) -> None:
        utterance = now.utterance
        assert utterance is not None
        duration = utterance.duration_ms / 1000.0
        if estimate and now.sentences_left:
            # Until every sentence is synthesised, guess the rest's length from its share of the text.
            said = max(1, len(utterance.text))
            duration *= (said + sum(len(s) + 1 for s in now.sentences_left)) / said
        fps = self.clock.fps
        self.realizer.speech_audio(now.cue.speech_id, utterance.frame_envelope(fps).tolist())
        self.realizer.speech_started(now.cue.speech_id, duration, (now.start_frame - now.cue_frame) / fps)

    def slice(self, frame: int) -> np.ndarray:
        """The character's audio for global frame ``frame`` (silence when not speaking); ends speech."""
        out = np.zeros(self.per_frame, dtype=np.float32)
        now = self._now
        if now is None or frame < now.start_frame:
            return out
        if now.utterance is None:
            now.start_frame = frame + 1  # the voice is late: it starts with the next frame
            return out
        a = (frame - now.start_frame) * self.per_frame
        samples = now.utterance.samples[a : a + self.per_frame]
        out[: samples.size] = samples
        if now.done and not now.open and a + self.per_frame >= now.utterance.samples.size:
            self._now = None
            self.realizer.speech_ended(now.cue.speech_id)
        return out

    async def envelope(self, chunk: int, late: asyncio.Event | None = None) -> tuple[float, ...] | None:
        """The mouth envelope of ``chunk``'s frames while a voice is cued or sounding, else None.

        Frames before the voice starts are closed (0). For frames it covers, this waits until synthesis
        has reached them, so the envelope never depends on how fast synthesis was; but not past ``late``
        (set when waiting longer would make the chunk late). Then a voice with no audio yet starts with
        the first frame sent after its audio is ready, as with ``when_ready``, and one that ran out of
        audio pauses (silence, the mouth closed) until the end of the chunk and goes on after it: no
        word is lost, the chunk keeps its time, and the frames depend on Piper's speed.
        """
        self._decided = max(self._decided, self.clock.first_frame(chunk + 1))
        now = self._now
        if now is None:
            return None
        n = self.clock.chunk_frames
        if now.utterance is None and not now.waits:
            return (0.0,) * n  # not ready: the mouth stays closed, the voice starts when it is
        first = self.clock.first_frame(chunk) - now.start_frame
        need = (first + n) * self.per_frame
        while (
            self._now is now and not now.done and (now.utterance is None or now.utterance.samples.size < need)
        ):
            if late is not None and late.is_set():
                self.overdue += 1
                if now.utterance is None:
                    now.waits = False
                    return (0.0,) * n
                self._pause(now, need)
                break
            now.progress.clear()
            await _first_of(now.progress, late)
        if self._now is not now:
            return None
        if now.utterance is None:
            return (0.0,) * n
        env = now.utterance.frame_envelope(self.clock.fps)
        return tuple(float(env[f]) if 0 <= f < env.size else 0.0 for f in range(first, first + n))

    def _pause(self, now: _Speaking, samples: int) -> None:
        """Silence after the audio there is (if any), up to ``samples``: what follows comes after it."""
        if now.utterance is None or (gap := samples - now.utterance.samples.size) <= 0:
            return
        silence = Utterance("", np.zeros(gap, dtype=np.float32), self.voice.rate, ())
        now.utterance = now.utterance.then(silence)

    def sounding(self, chunk: int) -> bool:
        """Whether the voice sounds during any frame of ``chunk``."""
        now = self._now
        if now is None or now.utterance is None:
            return False
        first = self.clock.first_frame(chunk) - now.start_frame
        frames = -(-now.utterance.samples.size // self.per_frame)
        return first + self.clock.chunk_frames > 0 and first < frames

    def interrupt(self, frame: int, speech_id: str | None = None) -> str | None:
        """Cut the voice at global frame ``frame`` (only ``speech_id``, if given); returns what was heard."""
        now = self._now
        if now is None or (speech_id is not None and now.cue.speech_id != speech_id):
            return None
        self._now = None
        now.progress.set()
        if now.task is not None:
            now.task.cancel()
        played = max(0, frame - now.start_frame) * self.per_frame
        heard = now.utterance.heard_text(played) if now.utterance is not None else ""
        self.realizer.speech_interrupted(now.cue.speech_id, heard, played / self.voice.rate)
        return heard

    async def close(self) -> None:
        for job in self._prepared.values():
            job.cancel()
        self._prepared.clear()
        now = self._now
        self._now = None
        if now is not None and now.task is not None:
            now.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await now.task


async def _first_of(event: asyncio.Event, other: asyncio.Event | None) -> None:
    """Until ``event`` or ``other`` (if any) is set."""
    if other is None:
        await event.wait()
        return
    waits = {asyncio.ensure_future(event.wait()), asyncio.ensure_future(other.wait())}
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()
