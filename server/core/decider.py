"""The next chunk's condition: the minds' decision with the voice acted on and its real mouth envelope.

A first decision per chunk (``decide``) and, after an urgent event, speculative re-decisions
(``redecide``) that change nothing unless they are used: the realizer's proposal is committed (its reports
published, its events marked reflected) only when its condition stands for frames already generated or
is to be generated; otherwise it is discarded and the realizer is as it was.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

import msgspec

from agent.minds import Minds
from agent.realizer import ChunkOutput
from events.vocabulary import Event
from server.media import MediaClock
from server.speech import SpeechPlayer
from streaming_model.condition import ChunkCondition


@dataclass(frozen=True)
class Decision:
    """A chunk's decision: the realizer's (``decision``), and with the voice acted on (``out``)."""

    decision: ChunkOutput
    out: ChunkOutput


@dataclass(frozen=True)
class Redecision:
    """A committed re-decision of a chunk: ``out`` (with the voice) to generate, or None when the frames
    already generated stand for it (its condition is theirs)."""

    decision: ChunkOutput
    out: ChunkOutput | None


class Decider:
    """Turns the minds and the voice into chunk conditions; ``last_frame`` is the last frame sent (speech
    stopped now stops sounding after it)."""

    def __init__(
        self, minds: Minds, player: SpeechPlayer, media: MediaClock, last_frame: Callable[[], int]
    ) -> None:
        self.minds = minds
        self.player = player
        self.media = media
        self._last_frame = last_frame

    async def decide(self, k: int, m: int, late: asyncio.Event | None = None) -> Decision:
        """Generator chunk ``k``'s decision, sent as media chunk ``m``; ``late`` is set once waiting for
        the voice would make the chunk late (``SpeechPlayer.envelope``)."""
        decision = self.minds.tick(k)
        return Decision(decision, await self._voice(decision, m, late))

    async def redecide(
        self,
        k: int,
        m: int,
        decided: ChunkOutput,
        generated: ChunkCondition,
        *,
        regenerate: bool,
        late: asyncio.Event | None = None,
    ) -> Redecision | None:
        """Re-decide chunk ``k`` (media chunk ``m``, decided as ``decided``, generated under ``generated``)
        with what the minds know now.

        The proposal is committed when its condition is the decided one (``out`` None: the frames stand
        for it) or when it is to be generated (``regenerate``); otherwise it is discarded (None) and what
        it would have reflected lands in the next chunk. ``late`` as for ``decide``.
        """
        realizer = self.minds.realizer
        proposal = realizer.propose(k)
        new = proposal.output
        if new.condition == decided.condition and not (
            new.speech_start or new.speech_stop or new.speech_extend
        ):
            return Redecision(realizer.commit(proposal), None)
        if not regenerate:
            realizer.discard(proposal)
            return None
        out = await self._voice(realizer.commit(proposal), m, late)
        return Redecision(new, None if out.condition == generated else out)

    def foresee(self, k: int, decided: ChunkOutput, event: Event) -> ChunkCondition | None:
        """The condition chunk ``k`` (decided as ``decided``) would be re-decided to once the reflexes have
        answered ``event``, an input only expected: nothing of it is kept. None where that changes nothing,
        or changes the voice (which a re-decision acts on at once, and a guess must not)."""
        reflex = self.minds.reflex
        if reflex is None:
            return None
        new = self.minds.realizer.foresee(k, lambda: reflex.imagine(event))
        if new.condition == decided.condition or new.speech_start or new.speech_stop or new.speech_extend:
            return None
        return new.condition

    async def _voice(self, out: ChunkOutput, m: int, late: asyncio.Event | None) -> ChunkOutput:
        """``out`` for media chunk ``m`` with the voice acted on and its real mouth envelope.

        Speech cued in chunk m starts with chunk m itself (``voice_start = "cue_chunk"``, the default) or
        chunk m+1 (``"next_chunk"``), and the decision of the first chunk it sounds in waits for its audio,
        so what the mouth does never depends on how fast synthesis happened to be (the same inputs give the
        same frames). The decision of chunk m waits for the first part of the speech in both (the realizer
        hears its length before it plans on), so ``cue_chunk`` costs no more waiting and sounds a chunk
        sooner. With ``"when_ready"`` it sounds from the first frame not yet sent once its first audio is
        ready, and chunks decided before that keep the mouth closed: where speech starts (and the frames
        after) then depends on Piper's speed. The rest of open speech (``speech_extend``) starts no sooner
        than the first chunk ``REST_SYNTHESIS_S`` after chunk m in every mode (``SpeechPlayer.extend``):
        a decision never waits for text that has just arrived.
        With ``"on_time"``, as ``cue_chunk`` but the decision does not wait for the voice's audio past
        ``late``: the chunk's mouth is closed and the voice starts, or goes on after a pause, when ready
        (``SpeechPlayer.envelope``; the frames then depend on Piper's speed, so the protocol's determinism
        holds only while it keeps up).
        """
        for speech_id in out.speech_stop:
            self.player.interrupt(self._last_frame() + 1, speech_id)
        mode = self.player.config.start
        start = self.media.first_frame(m + 1 if mode == "next_chunk" else m)
        for cue in out.speech_start:
            self.player.start(cue, start, cue_frame=self.media.first_frame(m), wait=mode != "when_ready")
        for cue in out.speech_extend:
            self.player.extend(cue, m)
        envelope = await self.player.envelope(m, late if mode == "on_time" else None)
        if envelope is not None:
            speaking = self.player.sounding(m)
            out = msgspec.structs.replace(
                out, condition=msgspec.structs.replace(out.condition, speaking=speaking, audio=envelope)
            )
        return out
