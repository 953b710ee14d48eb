"""Per-session limits (token buckets for message rate and audio rate), the server's session slots, and
how far behind a slow client may fall; their configuration."""

from __future__ import annotations

import time
from typing import Literal

import msgspec


class Limits(msgspec.Struct, frozen=True, kw_only=True):
    """What one session may send (audio in seconds of audio per second of wall time), how many sessions
    the server keeps, and how far behind a client may fall."""

    messages_per_s: float = 50.0
    message_burst: float = 100.0
    audio_realtime_factor: float = 1.5
    audio_burst_s: float = 3.0
    max_sessions: int = 64
    """Sessions with a client connected, at most: a ceiling. Below it the server admits what its
    generators and the machine measurably keep real-time (``generator_busy_max``, ``machine_busy_max``,
    ``server.admission``)."""
    admission: Literal["measured", "generators", "ceiling"] = "measured"
    """How sessions are admitted below ``max_sessions`` (``server.admission``): ``measured``, while the
    generator thread a new one joins and the whole machine measurably keep real-time with it;
    ``generators``, by the generator threads alone (where the machine's other work is not the server's to
    weigh); ``ceiling``, up to ``max_sessions`` whatever the figures (where the machine was sized by hand,
    and in the test suite, which runs its clients beside its servers)."""
    generator_busy_max: float = 0.6
    """A new session is admitted only while the generator thread it joins stays at most this busy with
    it (share of the last seconds spent on chunks, measured, plus what the model's warm-up costs say the
    session adds). Busier than this, chunks ran late on both machines measured (BENCHMARKS.md, "Sessions
    at once on this machine"): a thread's wall time counts its waits for a core, not their bursts."""
    machine_busy_max: float = 0.6
    """With ``admission = "measured"``, a new session is admitted only while the machine's cores stay at
    most this busy with it (the other processes over the last seconds, measured, plus this server's
    sessions and the newcomer, each at what one measurably cost lately: ``server.admission``). Busier than
    this, chunks ran late in bursts on the two cores measured (BENCHMARKS.md, "Where admission stops on
    this CPU"): late when a chunk's moment comes, not for want of CPU over the seconds."""
    max_waiting_sessions: int = 4
    """Sessions whose client went away, paused in their resume grace; beyond this many, the one that
    left first is ended. They do not count against ``max_sessions``."""
    resume_grace_s: float = 30.0
    media_queue_frames: int = 24
    media_max_age_s: float = 1.0
    """A media frame not written this long after it was due is dropped."""
    media_backlog_s: float = 0.5
    """A media frame is dropped when the client would get it (after what it has not taken yet) later than
    this after it is written."""


class TokenBucket:
    """``rate`` tokens per second up to ``burst``; ``take(n)`` is False (and takes nothing) when short."""

    def __init__(self, rate: float, burst: float, clock=time.monotonic) -> None:
        if rate <= 0 or burst <= 0:
            raise ValueError(f"rate and burst must be positive, got {rate} and {burst}")
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._tokens = burst
        self._t = clock()

    def take(self, n: float = 1.0) -> bool:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._t) * self.rate)
        self._t = now
        if self._tokens < n:
            return False
        self._tokens -= n
        return True
