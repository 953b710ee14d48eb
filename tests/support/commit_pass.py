"""The commit pass as it was before ``DiT.keys_values``: the whole network run, its prediction thrown
away. The reference the short pass is tested (tests/streaming_model/test_commit_pass.py) and timed
(benchmarks/generator.py) against."""

from __future__ import annotations

from typing import cast

import torch

from streaming_model.dit import AttendFn, DiT
from streaming_model.runtime import Session


class WholePass:
    """A DiT whose ``keys_values`` runs every block and the output head, as the commit pass did."""

    def __init__(self, dit: DiT) -> None:
        self._dit = dit

    def __getattr__(self, name: str) -> object:
        return getattr(self._dit, name)

    def keys_values(
        self, z: torch.Tensor, c: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, attend: AttendFn
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The keys and values of ``DiT.run``, after the whole pass."""
        return self._dit.run(z, c, cos, sin, attend)[1]


def commit_whole(session: Session, dit: DiT | None = None) -> Session:
    """``session`` with its later commit passes run through the whole network (its prefill is done), of
    ``dit`` when given (the fp32 model as loaded, to time the path as it was) or the session's own."""
    session.dit = cast("DiT", WholePass(session.dit if dit is None else dit))
    return session
