"""A fast energy-onset detector: claps, knocks and bangs as ``SoundOnset``, tens of milliseconds after them.

The audio is cut into 5 ms hops at fixed stream positions and each hop's energy (dBFS) is tracked against
an adaptive noise floor, which falls at once to a quieter hop and climbs only ``floor_rise_db_per_s``. A hop
is a candidate onset when it is

- loud in itself (``min_level_db``) and well above the floor (``above_floor_db``),
- a sudden jump: ``jump_db`` over the loudest of the three hops 10-25 ms before it, so the rise took at most
  10 ms (steady noise, however loud, never jumps), and
- not much quieter (``context_db``) than the loudest sound of the last ``context_ms``: a consonant's burst
  in the middle of speech is far quieter than the vowels around it.

A candidate is then confirmed as an impulse over the next ``confirm_ms`` (60 ms): nothing in that time may be
louder than its first 10 ms (by more than 1 dB), and both the mean power of its last 20 ms and the median
hop after the attack must have fallen ``decay_db`` below that attack. That is what tells a knock from
speech: a voice's onset keeps rising into its vowel and a vowel holds its level, while a knock or a clap
dies away within tens of milliseconds. A real hand clap is two or three bursts within 40 ms, each as
loud as the first (the air between the palms, then the fingers): with the old 30 ms window its second
burst fell in the last 20 ms and only 5 of 23 real claps gave an onset (tests/data/sounds); the median
keeps the rule as strict on held sounds as the shorter window was.

On speech: over 196 Piper sentences (7 texts, in digital silence and in room tone) it fired on none; with a
3 dB decay over single hops instead, it fired on 3-4 % of them, at syllables whose first 10 ms happened to
be their loudest. What can still fire is an isolated, sharply cut syllable ("t!", "Hah!") that dies away
within 30 ms. A sound that switches on and stays (a fan, music starting) is not an impulse. Not detected:
an impulse that does not rise 10 dB above ongoing speech or noise, or comes within ``context_ms`` after a
sound more than ``context_db`` louder than it.

An impulse that has already died away by ``early_ms`` (50 ms: the same tests over that shorter span) is
confirmed then, or at the first hop after it over which it has; a syllable's vowel keeps it open to the
full ``confirm_ms``, where it fails. On the real recordings (tests/data/sounds) every knock onset is
confirmed at 50 ms, the claps at 50-60 ms, most at 55 (their later bursts). No speech candidate of the five real
speakers nor of 120 renditions of 15 Piper sentences (plosives and all) that the full span rejects
passes over 50 ms or more; over 40-45 ms some did (staccato syllables: "Top, tip, tap."), over 30 ms six
of the real speakers'.

After an onset, ``refractory_ms`` pass before the next one. The event comes out between ``early_ms`` and
``confirm_ms`` plus one hop (55-65 ms) after the onset; its position is refined to the first sample of the
rise.

A hop that passes the candidate's tests as soon as it is heard (on the noise floor of that moment) is also
told at once as a ``Hunch`` (``events.hunch``), and told again, ``dropped``, where it is judged not an
onset: what a reaction may be prepared on during the confirmation, never what one is shown on.
"""

from __future__ import annotations

import math
from collections import deque

import msgspec
import numpy as np

from events.audio import SAMPLE_RATE
from events.hunch import Hunch
from events.stamp import Stamper
from events.vocabulary import Event, SoundOnset

LOUDER_LATER_DB = 1.0  # how much louder than its attack an impulse may get afterwards (fluctuation)
HISTORY = 3  # hops before the rise the jump is measured against (the one just before may hold its start)
FLOOR_MIN_DB = -90.0  # the floor never sinks below this (no microphone is quieter): strength stays meaningful
TAIL = 4  # hops at the end of the confirmation whose mean power must have decayed (20 ms: pitch periods
# make single 5 ms hops of a voice swing by several dB, so one quiet hop proves nothing)


def _mean_db(levels: list[float]) -> float:
    return 10.0 * math.log10(sum(10.0 ** (x / 10.0) for x in levels) / len(levels))


class OnsetConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Thresholds of the onset detector (levels are the energy of one hop, in dBFS)."""

    hop_ms: float = 5.0
    """Analysis hop (a whole number of samples at 16 kHz)."""
    min_level_db: float = -45.0
    """An onset hop is at least this loud."""
    above_floor_db: float = 15.0
    """An onset hop is at least this far above the noise floor."""
    jump_db: float = 10.0
    """An onset hop is this much louder than the loudest of the three hops 10-25 ms before it."""
    confirm_ms: float = 60.0
    """How long after the onset the detector listens to tell an impulse from the start of speech: long enough
    for a real hand clap, whose two or three bursts come within 40 ms of each other."""
    early_ms: float = 50.0
    """An impulse that passes the tests over this shorter span (or any span up to ``confirm_ms``) is confirmed
    then (``early_ms = confirm_ms`` turns this off)."""
    decay_db: float = 6.0
    """By the last 20 ms of ``confirm_ms`` an impulse has fallen this far below its attack (mean power), and
    so has the median hop after it: a clap's bursts are loud but brief, a vowel or a note holds."""
    context_ms: float = 300.0
    """How far back the detector looks for louder sound that the candidate would be part of."""
    context_db: float = 6.0
    """A candidate more than this below the loudest hop of the last ``context_ms`` is not an onset."""
    refractory_ms: float = 100.0
    """No onset within this time after the previous one."""
    floor_rise_db_per_s: float = 10.0
    """How fast the noise floor may climb (it falls at once)."""

    def __post_init__(self) -> None:
        hop = self.hop_ms * SAMPLE_RATE / 1000
        if hop < 8 or hop != int(hop):
            raise ValueError(f"hop_ms must be a whole number of samples (at least 8), got {self.hop_ms}")
        if self.confirm_ms < (TAIL + 2) * self.hop_ms:
            raise ValueError(f"confirm_ms must cover at least {TAIL + 2} hops, got {self.confirm_ms}")
        if not (TAIL + 2) * self.hop_ms <= self.early_ms <= self.confirm_ms:
            raise ValueError(
                f"early_ms must cover at least {TAIL + 2} hops and at most confirm_ms, got {self.early_ms}"
            )
        for name in (
            "above_floor_db",
            "jump_db",
            "decay_db",
            "context_ms",
            "refractory_ms",
            "floor_rise_db_per_s",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative, got {getattr(self, name)}")


class OnsetDetector:
    """Streaming onset detector: ``feed`` any number of samples, get ``SoundOnset`` events."""

    def __init__(self, stamp: Stamper, config: OnsetConfig | None = None) -> None:
        self.config = cfg = config if config is not None else OnsetConfig()
        self._stamp = stamp
        self._hop = round(cfg.hop_ms * SAMPLE_RATE / 1000)
        self._confirm = math.ceil(cfg.confirm_ms / cfg.hop_ms)
        self._early = min(math.ceil(cfg.early_ms / cfg.hop_ms), self._confirm)
        self._refractory = math.ceil(cfg.refractory_ms / cfg.hop_ms)
        self._rise = cfg.floor_rise_db_per_s * cfg.hop_ms / 1000
        # A candidate is judged once the hops after it are in: keep its context, itself and what follows.
        self._context = max(HISTORY + 1, math.ceil(cfg.context_ms / cfg.hop_ms))
        span = self._context + 1 + 1 + self._confirm
        self._db: deque[float] = deque([-math.inf] * span, maxlen=span)
        self._hops: deque[np.ndarray] = deque([np.zeros(self._hop, np.float32)] * (self._confirm + 2))
        self._pending = np.zeros(self._hop, dtype=np.float32)
        self._filled = 0
        self._count = 0  # complete hops
        self._floor: float | None = None
        self._quiet_until = 0  # first hop that may be an onset again
        self._hunched: deque[int] = deque()  # hops told as hunches, not judged yet
        self._hunches: list[Hunch] = []

    @property
    def floor_db(self) -> float | None:
        """The current noise floor (dBFS of one hop), None before the first hop."""
        return self._floor

    def take_hunches(self) -> list[Hunch]:
        """The hunches told since the last call, in order (``events.hunch``)."""
        hunches, self._hunches = self._hunches, []
        return hunches

    def feed(self, samples: np.ndarray) -> list[Event]:
        """Take the next samples (float32, 16 kHz mono) and return the onsets they confirm."""
        events: list[Event] = []
        i, n = 0, samples.size
        if self._filled:
            take = min(self._hop - self._filled, n)
            self._pending[self._filled : self._filled + take] = samples[:take]
            self._filled += take
            i = take
            if self._filled < self._hop:
                return events
            self._filled = 0
            self._hops_in(self._pending[None, :], events)
        whole = (n - i) // self._hop
        if whole:
            self._hops_in(samples[i : i + whole * self._hop].reshape(whole, self._hop), events)
        rest = samples[i + whole * self._hop :]
        self._pending[: rest.size] = rest
        self._filled = rest.size
        return events

    def _hops_in(self, hops: np.ndarray, events: list[Event]) -> None:
        power = np.einsum("ij,ij->i", hops, hops, dtype=np.float64) / self._hop
        levels = 10.0 * np.log10(np.maximum(power, 1e-12))
        for hop, level in zip(hops, levels.tolist(), strict=True):
            self._db.append(level)
            self._hops.append(hop.copy())  # the caller may reuse its buffer
            self._hops.popleft()
            self._count += 1
            self._hunch()
            self._judge(events)  # the oldest candidate first: an onset there holds off the ones after it
            if self._early < self._confirm:
                self._judge_early(events)

    def _hunch(self) -> None:
        """Tell the hop just heard as a hunch if it passes a candidate's tests already: on the floor as it is
        now, and its attack taken as its own level (the hop after it is not heard yet)."""
        cfg = self.config
        h, db, n = self._count - 1, self._db, len(self._db) - 1
        if self._floor is None or h < self._quiet_until:
            return
        if self._hunched and h < self._hunched[-1] + self._refractory:
            return  # the bursts of one clap: the first one's hunch stands for them
        level = db[n]
        if (
            level >= cfg.min_level_db
            and level - self._floor >= cfg.above_floor_db
            and level - max(db[n - 1 - i] for i in range(1, HISTORY + 1)) >= cfg.jump_db
            and level >= max(db[i] for i in range(n - self._context - 1, n - 1)) - cfg.context_db
        ):
            self._hunched.append(h)
            self._hunches.append(self._hunch_at(h, strength_db=level - self._floor))

    def _judge_early(self, events: list[Event]) -> None:
        """Confirm a hop ``early`` to ``confirm`` hops back (the older first) that is an impulse already over
        the span heard after it."""
        floor = self._floor
        if floor is None:
            return
        last = len(self._db) - 1
        for back in range(self._confirm - 1, self._early - 1, -1):
            c = self._count - 1 - back
            if c < self._quiet_until:
                continue
            attack = self._impulse(last - back, back, floor)
            if attack is not None:
                self._confirmed(c, back, attack, floor, events)
                self._drop_hunches(c, onset=True)

    def _judge(self, events: list[Event]) -> None:
        """Judge the hop ``confirm`` hops back (its history and its aftermath are now known)."""
        c = self._count - 1 - self._confirm
        if c < 0:
            return
        told = len(events)
        level = self._db[self._context + 1]
        floor = max(level, FLOOR_MIN_DB) if self._floor is None else self._floor
        if c >= self._quiet_until:
            attack = self._impulse(self._context + 1, self._confirm, floor)
            if attack is not None:
                self._confirmed(c, self._confirm, attack, floor, events)
        self._drop_hunches(c, onset=len(events) > told)
        # The floor learns from the judged hop: at once if quieter, slowly if louder, and not from an impulse.
        if level < floor:
            self._floor = max(level, FLOOR_MIN_DB)
        elif c >= self._quiet_until:
            self._floor = min(level, floor + self._rise)
        else:
            self._floor = floor

    def _impulse(self, k: int, span: int, floor: float) -> float | None:
        """The attack of the candidate at ``self._db[k]`` if it is an impulse over the ``span`` hops from it,
        else None: a sudden rise well above ``floor``, not part of a louder sound before it, nothing louder
        after it, and fallen away by its end."""
        cfg, db = self.config, self._db
        level = db[k]  # k - 1 may hold the start of its rise
        if not (
            level >= cfg.min_level_db
            and level - floor >= cfg.above_floor_db
            and level - max(db[k - 1 - i] for i in range(1, HISTORY + 1)) >= cfg.jump_db
        ):
            return None
        attack = max(level, db[k + 1])
        context = max(db[i] for i in range(k - 1 - self._context, k - 1))
        after = sorted(db[i] for i in range(k + 2, k + 1 + span))
        end = _mean_db([db[k + span - i] for i in range(TAIL)])
        impulse = (
            attack >= context - cfg.context_db
            and after[-1] <= attack + LOUDER_LATER_DB
            and end <= attack - cfg.decay_db
            and after[len(after) // 2] <= attack - cfg.decay_db
        )
        return attack if impulse else None

    def _confirmed(self, c: int, back: int, attack: float, floor: float, events: list[Event]) -> None:
        """Report hop ``c``, judged ``back`` hops after it, as an onset."""
        at = self._refine(back, floor)
        events.append(self._stamp(SoundOnset, audio_ms=at * 1000.0 / SAMPLE_RATE, strength_db=attack - floor))
        self._quiet_until = c + self._refractory

    def _drop_hunches(self, c: int, *, onset: bool) -> None:
        """Hop ``c`` is judged: an onset there answers the hunches of the hops around it (the floor a hunch
        was heard on may put the rise a hop or two away); a hunch no onset came near is dropped."""
        while self._hunched and (onset or self._hunched[0] < c - HISTORY):
            h = self._hunched[0]
            if onset and h > c + HISTORY:
                break
            self._hunched.popleft()
            if not (onset and h >= c - HISTORY):
                self._hunches.append(self._hunch_at(h, dropped=True))

    def _hunch_at(self, h: int, strength_db: float = 0.0, dropped: bool = False) -> Hunch:
        """The hunch of hop ``h``: its onset would come ``early_ms`` and a hop after it is told, at the
        soonest."""
        cfg = self.config
        audio_ms = h * self._hop * 1000.0 / SAMPLE_RATE
        confirm_ms = self._early * cfg.hop_ms + cfg.hop_ms
        return Hunch(
            kind="sound.onset",
            audio_ms=audio_ms,
            confirm_ms=confirm_ms,
            strength_db=strength_db,
            dropped=dropped,
        )

    def _refine(self, back: int, floor: float) -> int:
        """The first sample of the rise, within the candidate hop (``back`` hops before the last) and the one
        before it."""
        i = self._confirm - back
        x = np.abs(np.concatenate((self._hops[i], self._hops[i + 1])))
        threshold = max(0.25 * float(x.max()), 4.0 * 10.0 ** (floor / 20.0))
        return (self._count - 2 - back) * self._hop + int(np.argmax(x >= threshold))

    def flush(self) -> list[Event]:
        """End the stream. Onsets still being confirmed need the hops that follow them: none is reported (and
        their hunches are dropped)."""
        self._drop_hunches(self._count + HISTORY, onset=False)
        return []
