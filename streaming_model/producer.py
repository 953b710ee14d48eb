"""A session's chunk steps, frames first and cache after: what every model worker runs on a backend session.

    producer = Producer(session, manifest)
    jpegs = producer.produce(cond, cancel, encode, finish_times)   # the frames; the chunk is held
    jpegs = producer.replace(cond, cancel, encode, finish_times)   # the held chunk again, under cond
    jpegs = producer.splice(k, cond, cancel, encode, finish_times) # chunk k again; the ones after it dropped
    jpegs, ahead = producer.foresee(k, cond, cancel, encode, ...)  # the same, nothing changed ...
    producer.adopt(ahead)                                          # ... until it is wanted (if still valid)
    producer.produce(...)                                          # commits the held chunk, then the next
    state = producer.capture()                                     # commits what is held first

A chunk's frames are decoded and finished (encoded, say) straight from the denoised chunk and handed back;
the session takes the chunk (``commit``: the tiny model's cache-writing pass, about a third of a chunk)
only when the next chunk is made, the state captured, or the session rolled back. So a chunk's frames
never wait for its commit, and a chunk that is produced but not yet sent is replaced by generating it
again from the state it was generated from: no snapshot, no rollback, nothing to restore when the
replacement is abandoned. The frames are the same either way (decoding reads only the chunk, and the
commit reads only the chunk and the state before it): a session's frames do not depend on when its
chunks were committed.

The in-process worker (``streaming_model.worker``), the lanes (``streaming_model.lanes``, which commit
the held chunks of a batch in one pass) and a cluster's slot actor (``server.cluster.slot``) all run a
session through one of these, so they run exactly the same steps.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from .backend import BackendManifest, BackendSession, BatchingBackend, Pending, apply_fallbacks
from .condition import ChunkCondition
from .runtime import SessionSnapshot

T = TypeVar("T")


@dataclass(frozen=True)
class Ahead:
    """A splice made ahead (``Producer.foresee``): chunk ``chunk`` made again as ``pending`` on ``base``, the
    state before it, in the producer's history ``era``."""

    chunk: int
    base: object
    pending: Pending
    era: int


class Producer:
    """One backend session and the chunk it last produced, held back from its state until it is final."""

    def __init__(self, session: BackendSession, manifest: BackendManifest) -> None:
        self.session = session
        self.manifest = manifest
        self.held: Pending | None = None
        """The chunk produced last, its frames out, not yet committed (None once committed)."""
        self.commit_s = 0.0
        """Seconds spent committing held chunks since ``take_commit_s`` was last asked."""
        self.era = 0
        """Counts the times the chunks produced were rewritten (a splice, a rollback, a restore): a splice
        made ahead is adopted only in the era it was made in."""
        self._base: tuple[int, int, object] | None = None
        """(chunk, era, the state before it) from the last ``foresee`` that rolled back: what a splice of
        that chunk starts from (``foresee`` put the state back by a restore, which leaves nothing to roll
        back)."""

    @property
    def index(self) -> int:
        """The next chunk's index: chunks produced, the held one included."""
        return self.session.index + (self.held is not None)

    def settle(self) -> None:
        """Commit the held chunk, if any: from now on it is part of the session's state."""
        if self.held is None:
            return
        began = time.perf_counter()
        self.session.commit(self.held)
        self.held = None
        self.commit_s += time.perf_counter() - began

    def take_commit_s(self) -> float:
        """Seconds spent committing since the last call (what a produce spent on the chunk before it)."""
        spent, self.commit_s = self.commit_s, 0.0
        return spent

    def produce(
        self,
        cond: ChunkCondition,
        cancel: threading.Event,
        finish: Callable[[np.ndarray], T],
        finish_times: deque[float],
    ) -> T | None:
        """Commit the held chunk, then generate the next one under ``cond``, decode and ``finish`` its frames
        and hold it; None (nothing held) when ``cancel`` was set before it was denoised. Appends the seconds
        from denoised to finished to ``finish_times``."""
        self.settle()
        return self._generate(cond, cancel, finish, finish_times)

    def hold(
        self, pending: Pending, frames: np.ndarray, cancel: threading.Event, finish: Callable[[np.ndarray], T]
    ) -> T | None:
        """A chunk generated and decoded with a batch's (after ``settle``): ``finish`` its ``frames`` and hold
        it, as ``produce`` does; None (nothing held) when ``cancel`` is set."""
        return self._finish(pending, cancel, finish, deque(maxlen=1), frames)

    def replace(
        self,
        cond: ChunkCondition,
        cancel: threading.Event,
        finish: Callable[[np.ndarray], T],
        finish_times: deque[float],
    ) -> T | None:
        """The last produced chunk again, under ``cond``; None, and that chunk as it was, when ``cancel`` was
        set before the new one was denoised. The held chunk is simply generated again; a chunk already
        committed (captured since) is rolled back first and restored if the replacement is abandoned
        (``splice`` of the last chunk)."""
        return self.splice(self.index - 1, cond, cancel, finish, finish_times)

    def splice(
        self,
        chunk: int,
        cond: ChunkCondition,
        cancel: threading.Event,
        finish: Callable[[np.ndarray], T],
        finish_times: deque[float],
    ) -> T | None:
        """Chunk ``chunk`` again, under ``cond``, and every chunk produced after it forgotten (the next
        ``produce`` makes the one after it again): what a reaction shown in the unsent frames of a chunk
        already playing needs. None, and every chunk as it was, when ``cancel`` was set before the new one
        was denoised."""
        dropped, self.held = self.held, None
        before = self._back_to(chunk)
        out = self._generate(cond, cancel, finish, finish_times)
        if out is None:
            if before is not None:
                self.session.restore(before)
            self.held = dropped  # generated from the state restored
        else:
            self.era += 1
        return out

    def foresee(
        self,
        chunk: int,
        cond: ChunkCondition,
        cancel: threading.Event,
        finish: Callable[[np.ndarray], T],
        finish_times: deque[float],
    ) -> tuple[T, Ahead] | None:
        """Chunk ``chunk`` again under ``cond``, as ``splice`` would make it, with every chunk left as it
        was: its frames, and the splice for ``adopt`` (a reaction prepared on an input not yet certain).
        None when ``cancel`` was set before it was denoised."""
        held, era = self.held, self.era
        before = self._back_to(chunk)
        try:
            base = self.session.snapshot()
            if before is not None:
                self._base = (chunk, era, base)
            pending = self.session.generate(apply_fallbacks(cond, self.manifest), cancel)
            out = self._finish(pending, cancel, finish, finish_times)
            return None if out is None or pending is None else (out, Ahead(chunk, base, pending, era))
        finally:
            if before is not None:
                self.session.restore(before)
            self.held = held

    def _back_to(self, chunk: int) -> object | None:
        """Put the session's state back to before ``chunk``; the state it had, None where ``chunk`` is not
        committed (the held one: nothing to undo)."""
        back = self.session.index - chunk  # committed chunks to undo
        if not back:
            return None
        before = self.session.snapshot()
        if self._base is not None and self._base[:2] == (chunk, self.era):
            self.session.restore(self._base[2])
        else:
            self.session.rollback(back)
        return before

    def adopt(self, ahead: Ahead) -> bool:
        """Make the splice ``foresee`` made the one done (as ``splice`` leaves it: that chunk held, the ones
        after it forgotten), if no chunk before it has been rewritten since; whether it was."""
        if ahead.era != self.era or self.index < ahead.chunk:
            return False
        self.session.restore(ahead.base)
        self.held = ahead.pending
        self.era += 1
        return True

    def _generate(
        self,
        cond: ChunkCondition,
        cancel: threading.Event,
        finish: Callable[[np.ndarray], T],
        finish_times: deque[float],
    ) -> T | None:
        """Generate a chunk under ``cond`` on the session's state as it is, then finish and hold it."""
        pending = self.session.generate(apply_fallbacks(cond, self.manifest), cancel)
        return self._finish(pending, cancel, finish, finish_times)

    def _finish(
        self,
        pending: Pending | None,
        cancel: threading.Event,
        finish: Callable[[np.ndarray], T],
        finish_times: deque[float],
        frames: np.ndarray | None = None,
    ) -> T | None:
        if pending is None or cancel.is_set():
            return None  # also when it finished in the same instant it was cancelled: hold nothing
        denoised = time.perf_counter()
        out = finish(self.session.decode(pending) if frames is None else frames)
        finish_times.append(time.perf_counter() - denoised)
        self.held = pending
        return out

    def rollback(self, k: int) -> None:
        """Forget the last ``k`` chunks produced (the held one first)."""
        self.era += 1
        if k > 0 and self.held is not None:
            self.held, k = None, k - 1
        self.session.rollback(k)

    def snapshot(self) -> object:
        """The session's state with every chunk produced in it."""
        self.settle()
        return self.session.snapshot()

    def restore(self, snap: object) -> None:
        """Continue from a snapshot (the held chunk is dropped, but only once the snapshot is taken)."""
        self.era += 1
        self.session.restore(snap)
        self.held = None

    def export(self) -> bytes:
        """The state with every chunk produced, as the backend's portable bytes."""
        return self.session.export_state(self.snapshot())

    def capture(self) -> SessionSnapshot | bytes:
        """The state with every chunk produced, for a store: the tiny model's snapshot as it is, any other
        backend's as portable bytes."""
        snap = self.snapshot()
        return snap if isinstance(snap, SessionSnapshot) else self.session.export_state(snap)

    def restore_state(self, state: object) -> None:
        """Continue from a stored state: its backend's bytes, or a snapshot object."""
        self.restore(self.session.import_state(state) if isinstance(state, bytes) else state)

    def close(self) -> None:
        """Free the session (what is held is never committed)."""
        self.held = None
        self.session.close()


def settle_many(batcher: BatchingBackend, producers: Sequence[Producer]) -> None:
    """``settle`` for each producer, their held chunks committed in one pass (``commit_many``)."""
    holding = [p for p in producers if p.held is not None]
    if not holding:
        return
    began = time.perf_counter()
    batcher.commit_many([p.session for p in holding], [p.held for p in holding if p.held is not None])
    spent = time.perf_counter() - began
    for p in holding:
        p.held = None
        p.commit_s += spent
