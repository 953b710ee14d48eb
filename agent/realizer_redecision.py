"""Re-deciding the chunk in flight as a transaction: a ``Proposal`` holds back every event its decision
reports until it is committed, and a discarded one puts the realizer's state back as it was."""

from __future__ import annotations

import copy
from collections.abc import Callable

from agent.realizer_outputs import ChunkOutput
from agent.realizer_reports import Reporter
from agent.realizer_state import Proposal


class Redecision:
    """One realizer's re-decisions, at most one open at a time: ``fields`` reads the realizer's state
    (what a snapshot holds), ``put_back`` sets it again; ``reporter`` holds the events meanwhile."""

    def __init__(
        self,
        fields: Callable[[], dict[str, object]],
        put_back: Callable[[dict[str, object]], None],
        reporter: Reporter,
    ) -> None:
        self._fields = fields
        self._put_back = put_back
        self._reporter = reporter
        self._open: Proposal | None = None

    def check_closed(self) -> None:
        """Refuse (``RuntimeError``) while a re-decision is open: nothing else may touch the realizer."""
        if self._open is not None:
            raise RuntimeError("a re-decision is open: commit or discard it first")

    def propose(self, decide: Callable[[], ChunkOutput]) -> Proposal:
        """Run ``decide`` with every event held back; an error in it puts the state back."""
        before = copy.deepcopy(self._fields())
        self._reporter.hold()
        try:
            output = decide()
        except BaseException:
            self._put_back(before)
            raise
        finally:
            held = self._reporter.release()
        self._open = Proposal(output, before, held)
        return self._open

    def commit(self, proposal: Proposal) -> ChunkOutput:
        """Publish what ``proposal`` held back; its output is its chunk's decision."""
        self._settle(proposal)
        for event in proposal._held:
            self._reporter.publish(event)
        return proposal.output

    def discard(self, proposal: Proposal) -> None:
        """Put the state back as it was before ``proposal``; what it held back is never published."""
        self._settle(proposal)
        self._put_back(proposal._before)

    def _settle(self, proposal: Proposal) -> None:
        if self._open is not proposal:
            raise RuntimeError("this proposal is not the open one (already committed or discarded)")
        self._open = None
