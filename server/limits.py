"""Per-session limits: token buckets for message rate and audio rate, and their configuration."""

from __future__ import annotations

import time

import msgspec


class Limits(msgspec.Struct, frozen=True, kw_only=True):
    """What one session may send. Audio is measured in seconds of audio per second of wall time."""

    messages_per_s: float = 50.0
    message_burst: float = 100.0
    audio_realtime_factor: float = 1.5
    audio_burst_s: float = 3.0
    max_sessions: int = 4
    resume_grace_s: float = 30.0
    media_queue_frames: int = 24


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
