"""When things happen in a session: the media clock against a clock that can be swapped for a virtual one.

Chunk m is sent at ``t0 + m*T`` and generated from ``lead`` chunks before that; frame f is due at
``t0 + f/fps``. While the client is away the schedule is paused and, on its return, shifted by the time it
was away. A redirect (regenerating the chunk in flight) or a replacement (regenerating a generated chunk not
yet sent) is tried only while a regeneration still fits before the send: the typical chunk time (median
of recent ones) times a margin. A replacement still denoising when only the time to finish a chunk is
left is abandoned (finishing cannot be interrupted).

Everything here reads time from a ``Clock``: the event loop's in a session, a virtual one in tests, so the
scheduling decisions are tested deterministically rather than with sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections import deque
from collections.abc import Callable, Iterator
from typing import Protocol

import numpy as np

from server.media import MediaClock
from streaming_model.backend import BackendManifest

FINISH_SLACK_S = 0.01
"""A replacement still denoising when only the time to finish a chunk (decode, encode: its p95 over recent
chunks) plus this is left before the send is abandoned, and the chunk already generated is sent."""

MAKING_QUANTILE = 95
"""A decision that waits to its deadline leaves the time that this share (%) of recent chunks took from
decision to ready: the rarest slow chunks (a neighbour's warm-up) would make the deadline useless."""

HANDOFF_S = 0.002
"""A generated chunk goes to the sender this long before its first frame is due."""

LEAD_HEADROOM = 3.0
"""Without replacement the lead leaves room for a chunk that takes this many times its declared p95
(generating, then finishing): a busy second core doubles a chunk's time here (ENVIRONMENT.md), and the
rest is for the tail."""
LEAD_MIN, LEAD_MAX = 0.5, 1.0
"""Lead bounds in chunks: at least half a chunk, so that an urgent event still finds time to redirect; at
most one, as generation of a chunk cannot begin before the previous one is done."""


def lead_for(manifest: BackendManifest, replaces: bool) -> float:
    """Chunks of lead for a session of this backend, from what it declares.

    Where a generated chunk can be replaced until it is sent (``replaces``), generating early costs no
    reaction time (an input that comes meanwhile regenerates it), only work: the lead is a whole chunk,
    all of it room for a slow chunk on a busy machine (warm-up costs were 3-6 times lower than chunk times
    in the soak), and the conductor starts the next chunk sooner still, once the one before can no longer
    be replaced (``hand_at``). Where it cannot, every chunk generated early is latency added to every reaction: the
    lead is what the costs measured at warm-up need, with ``LEAD_HEADROOM``: a chunk's generation begins
    with the commit of the chunk before it, then it is generated and finished.
    """
    if replaces:
        return LEAD_MAX
    costs = manifest.costs
    need_s = LEAD_HEADROOM * (costs.commit_p50_ms + costs.chunk_p95_ms + costs.finish_p50_ms) / 1000.0
    clock = manifest.vocabulary
    return min(LEAD_MAX, max(LEAD_MIN, need_s * clock.fps / clock.frames_per_chunk))


class Cancellable(Protocol):
    """A callback set for later that can be called off."""

    def cancel(self) -> None: ...


class Clock(Protocol):
    """Time for a session: seconds that only go forward, sleeping until a time, a callback at a time."""

    def time(self) -> float: ...

    async def sleep_until(self, t: float) -> None: ...

    def call_at(self, t: float, callback: Callable[[], None]) -> Cancellable: ...


class LoopClock:
    """The running event loop's clock."""

    def time(self) -> float:
        return asyncio.get_running_loop().time()

    async def sleep_until(self, t: float) -> None:
        if (delay := t - self.time()) > 0:
            await asyncio.sleep(delay)

    def call_at(self, t: float, callback: Callable[[], None]) -> asyncio.TimerHandle:
        return asyncio.get_running_loop().call_at(t, callback)


class ChunkSchedule:
    """One session's timetable: send and start times, pauses, and what still fits before a send."""

    def __init__(
        self,
        media: MediaClock,
        *,
        lead_chunks: float,
        redirect: bool,
        redirect_margin: float,
        finish_times: deque[float],
        clock: Clock | None = None,
        aligned: bool = False,
    ) -> None:
        """``aligned``: the media clock starts (and resumes) on the grid of whole chunks of the session
        clock, the grid every aligned session of a process shares, so that their chunks fall due
        together and a batching generator takes them as one batch."""
        self.media = media
        self.aligned = aligned
        self.lead_chunks = lead_chunks
        self.redirect = redirect
        self.redirect_margin = redirect_margin
        self.clock: Clock = clock or LoopClock()
        self.chunk_times: deque[float] = deque(maxlen=200)
        """Seconds each recent chunk took to generate, decode and encode: what a regeneration takes (not
        the commit of the chunk before it, which a produce does first and a regeneration does not)."""
        self.made_times: deque[float] = deque(maxlen=200)
        """Seconds from each recent chunk's decision to its frames being ready: the commit of the chunk
        before, generating (with any redirects), decode and encode: what a decision must leave before the
        send."""
        self.produce_times: deque[float] = deque(maxlen=200)
        """Seconds each recent chunk's last generation took, start to frames ready, the commit of the chunk
        before included: what making a chunk again after a splice takes (no decision, no redirect, no
        splice of its own: those make a decision's ``made_times`` longer, and every reaction adds one)."""
        self._finish_times = finish_times  # the model worker's: decode and encode of recent chunks
        self._t0 = 0.0
        self._left_at: float | None = None

    def begin(self, delay_s: float) -> None:
        """The session's first chunk is sent ``delay_s`` from now (aligned: on the grid's next chunk
        boundary from then on)."""
        self._t0 = self._on_grid(self.clock.time() + delay_s)

    def _on_grid(self, t: float) -> float:
        if not self.aligned:
            return t
        chunk = self.media.chunk_s
        return math.ceil(t / chunk - 1e-9) * chunk

    def now(self) -> float:
        return self.clock.time()

    def send_at(self, m: int) -> float:
        """When media chunk ``m``'s first frame is due."""
        return self._t0 + m * self.media.chunk_s

    def frame_at(self, frame: int) -> float:
        """When global frame ``frame`` is due."""
        return self._t0 + frame * self.media.frame_s

    def start_at(self, m: int) -> float:
        """When generation of media chunk ``m`` starts: ``lead_chunks`` before its send."""
        return self.send_at(m) - self.lead_chunks * self.media.chunk_s

    def hand_at(self, m: int) -> float:
        """Until when the generated chunk ``m`` may still be replaced: while a regeneration started then
        would still be ready for its send (``time_to_redo``), and no later than just before its first frame
        is due or when the next chunk's generation starts. After it, the next chunk's making may begin."""
        redo_s = self.redo_s() if self.redirect else 0.0
        return min(self.start_at(m + 1), self.send_at(m) - max(HANDOFF_S, redo_s))

    def pause(self) -> None:
        """The client went away: the media clock stops."""
        if self._left_at is None:
            self._left_at = self.clock.time()

    def resume(self) -> None:
        """The client is back: the media clock goes on from where it stopped."""
        if self._left_at is not None:
            self._t0 = self._on_grid(self._t0 + self.clock.time() - self._left_at)
            self._left_at = None

    def delay(self, seconds: float) -> None:
        """The media clock waits ``seconds`` (the generator froze: its worker died and it moved), so the
        frames after the freeze keep their pace instead of coming late in a burst."""
        self._t0 = self._on_grid(self._t0 + seconds)

    def typical(self) -> float:
        """Typical seconds to generate, decode and encode one chunk."""
        return float(np.median(self.chunk_times)) if self.chunk_times else self.media.chunk_s / 2

    def finish_s(self) -> float:
        """Seconds that finishing a denoised chunk (decode, encode) takes in 95 % of chunks."""
        finish = self._finish_times
        return float(np.percentile(list(finish), 95)) if finish else self.media.chunk_s / 4

    def making_s(self) -> float:
        """Seconds from a decision to its chunk being ready in 95 % of recent chunks."""
        return self._making_quantile(self.made_times)

    def remake_s(self) -> float:
        """Seconds that making a chunk again (commit of the chunk before, generate, decode, encode) takes in
        95 % of recent chunks."""
        return self._making_quantile(self.produce_times)

    def _making_quantile(self, times: deque[float]) -> float:
        """``MAKING_QUANTILE`` of ``times``; half a chunk before any was measured."""
        return float(np.percentile(list(times), MAKING_QUANTILE)) if times else self.media.chunk_s / 2

    def redo_s(self) -> float:
        """The time a regeneration must have before a send: the typical chunk time, with the margin."""
        return self.typical() * self.redirect_margin

    def time_to_redo(self, m: int) -> bool:
        """Whether a regeneration of media chunk ``m`` started now still fits before its send."""
        left = self.send_at(m) - self.clock.time()
        return self.redirect and left >= self.redo_s()

    def decide_by(self, m: int) -> float:
        """Until when a decision of media chunk ``m`` may wait (for the voice) and the chunk, made after
        it, still be ready for its send: ``making_s`` before it. (A typical regeneration's time would not
        do: a chunk's first making also commits the chunk before, and half of all chunks take longer than
        the typical one; with it, on a loaded machine, most chunks that waited to it were late.)"""
        return self.send_at(m) - self.making_s()

    @contextlib.contextmanager
    def deciding(self, m: int) -> Iterator[asyncio.Event]:
        """An event set at ``decide_by(m)`` for as long as the block runs (a decision of chunk ``m``)."""
        late = asyncio.Event()
        timer = self.clock.call_at(self.decide_by(m), late.set)
        try:
            yield late
        finally:
            timer.cancel()

    def splice_from(self, m: int, unsent: int, frames: int, made_in: float | None = None) -> int | None:
        """The first frame of media chunk ``m`` (handed over, its frames from ``unsent`` on not yet sent, of
        ``frames``) that a typical regeneration started now would be ready for (one ``made_in`` seconds
        from now where given: 0 for a splice made ahead), where the chunk after it can then still be made
        again for its send (``remake_s``); None where none can. No margin: a splice that comes late shows
        from the frame after (``MediaOut.splice``)."""
        ready = self.clock.time() + (self.typical() if made_in is None else made_in)
        if not self.redirect or ready + self.remake_s() > self.send_at(m + 1):
            return None
        first = self.media.first_frame(m)
        return next((f for f in range(unsent, frames) if self.frame_at(first + f) >= ready), None)

    def splice_deadline(self, m: int, frames: int) -> float:
        """When a splice into media chunk ``m`` (of ``frames``) still denoising is abandoned: when it could
        no longer be finished for the chunk's last frame, or the chunk after it made for its send."""
        last = self.frame_at(self.media.first_frame(m) + frames - 1) - self.finish_s() - FINISH_SLACK_S
        return min(last, self.send_at(m + 1) - self.remake_s() - self.finish_s())

    def replace_deadline(self, m: int) -> float:
        """When a replacement of media chunk ``m`` still denoising is abandoned."""
        return self.send_at(m) - self.finish_s() - FINISH_SLACK_S

    def on_time(self, m: int, ready_at: float) -> bool:
        """Whether media chunk ``m``, ready at ``ready_at``, was ready for its send."""
        return ready_at <= self.send_at(m) + 1e-3
