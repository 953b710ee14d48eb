"""The Director's plans on their way to the realizer: each block stamped as the Director's (the run's
epoch, the inputs it answers), a ``say`` that continues the speech opened early closing that speech
(``agent.streamed_speech``), and each plan accepted told to the client (``DirectorPlan``)."""

from __future__ import annotations

import msgspec

from agent.director_state import DirectorStats
from agent.plans import Block
from agent.progress import DirectorPlan
from agent.realizer import Realizer, Submission
from agent.streamed_speech import EarlySpeech
from events.bus import EventBus
from events.stamp import Stamper


class PlanSender:
    """Hands the Director's blocks to the realizer."""

    def __init__(
        self,
        realizer: Realizer,
        early: EarlySpeech,
        stats: DirectorStats,
        bus: EventBus | None,
        stamp: Stamper,
    ) -> None:
        """``early``, ``stats`` and ``stamp`` are the Director's own, shared."""
        self.realizer = realizer
        self.early = early
        self.stats = stats
        self.bus = bus
        self.stamp = stamp

    def submit(self, block: Block, epoch: int, causes: tuple[str, ...], *, open: bool = False) -> Submission:
        """``block`` from the run of ``epoch``, answering every input the run took (the latest first);
        ``open``: a speech whose text is still streaming. A ``say`` continuing a speech opened early
        closes it with its whole text, as the same block."""
        cause = causes[-1] if causes else None
        block = msgspec.structs.replace(block, source="director", epoch=epoch, cause=cause, also=causes[:-1])
        if not open:
            extended = self.early.continue_with(block)
            if extended is not None:
                return extended
        submission = self.realizer.open_speech(block) if open else self.realizer.submit(block)
        if submission.accepted:
            self.stats.plans += 1
            if self.bus is not None:
                summary = block.label or ", ".join(type(b).__name__.lower() for b in block.behaviors)
                self.bus.publish_nowait(
                    self.stamp(DirectorPlan, plan_id=submission.block_id, epoch=epoch, summary=summary)
                )
        return submission
