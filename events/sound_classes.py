"""Sound classes: YAMNet over the last second of the stream, turned into ``SoundClass`` events.

The classifier keeps a ring of the last 0.975 s (one YAMNet patch) and classifies it

- every ``hop_ms`` of audio, for sounds that have no sharp onset (music, laughter, a shout), and
- at ``onset_delays_ms`` after each onset the energy detector reports (``note_onset``): early, for a
  clean sound, and again when the window holds the whole knock or clap and the next one or two; the
  event then carries the onset's id.

A label fires when its score reaches its threshold, and not again within ``repeat_ms`` of audio, so a
run of knocks is one ``Knock``. Quiet windows are not classified at all (``min_rms_db``).

YAMNet alone names few real knocks and claps, so each onset is also named by ``events.impulse_names``
at its first look (the burst's spectrum, YAMNet's scores of that window as vetoes and as a hand): its
``Knock`` or ``Clapping`` comes out as a ``SoundClass`` with the onset's id, under the same repeat rule.
While the window holds an impulse it named, YAMNet's own impulse labels ("Knock", "Clapping", "Finger
snapping") fire only where YAMNet is as sure as the namer's ``trust``, so the two do not contradict.
"""

from __future__ import annotations

import bisect

import msgspec
import numpy as np

from events.audio import AudioClock, validate_samples
from events.errors import BadInput
from events.impulse_names import ImpulseNameConfig, Name, name, shares
from events.stamp import Stamper
from events.vocabulary import Event, SoundClass, SoundOnset
from events.yamnet import PATCH_SAMPLES, SAMPLE_RATE, YamNet

DEFAULT_THRESHOLDS: dict[str, float] = {
    # AudioSet display names. YAMNet's quantised logits move in steps of ~0.76, so scores jump
    # 0.09 -> 0.18 -> 0.32 -> 0.5 -> 0.68 near the middle: thresholds sit on those steps.
    "Knock": 0.3,
    "Clapping": 0.3,
    "Applause": 0.3,
    "Finger snapping": 0.3,
    "Laughter": 0.3,
    "Cough": 0.3,
    "Sneeze": 0.3,
    "Whistling": 0.3,
    "Shout": 0.3,
    "Baby cry, infant cry": 0.3,
    "Music": 0.5,
    "Door": 0.8,  # a run of knocks on a door lifts "Door" to 0.3-0.7 as well: leave that to "Knock"
    "Doorbell": 0.3,
    # Not "Glass": on the real test set YAMNet gave it only to sounds that were not glass (knocks, a clap
    # train and a doorbell in fan noise), and nothing answers it.
}


class SoundClassConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Which YAMNet labels become events, and when the classifier looks."""

    thresholds: dict[str, float] = msgspec.field(default_factory=lambda: dict(DEFAULT_THRESHOLDS))
    """AudioSet display name -> the score (0..1) at which it fires."""
    hop_ms: float = 240.0
    """Classify every this much audio; 0 turns the periodic look off (onsets only)."""
    onset_delays_ms: tuple[float, ...] = (150.0, 250.0, 400.0)
    """Look this long after each onset: early for a lone clean knock, later when the window holds the next
    knock or two as well (YAMNet's "Knock" wants a run). On the test knocks in quiet room noise this found
    10 runs of 10, a median 330 ms after the first knock; a single look at 150 ms found half of them."""
    repeat_ms: float = 1500.0
    """A label does not fire again within this much audio of its last event."""
    tail_ms: float = 975.0
    """Once a label that scored over its threshold no longer does, no other label fires for this long: the
    window still holds that sound's fading end, which YAMNet names as something else (a doorbell's last
    chime is "Music" at 0.5, a cough's end a "Baby cry"). One window by default; 0 turns this off. Names
    of impulses from their spectrum (``impulses``) are not held back: each has its own onset."""
    min_rms_db: float = -60.0
    """Windows quieter than this (dBFS) are not classified: nothing to hear, no CPU spent."""
    max_pending_looks: int = 32
    impulses: ImpulseNameConfig | None = msgspec.field(default_factory=ImpulseNameConfig)
    """How onsets are named from their spectrum (``events.impulse_names``); None: YAMNet alone names them."""
    threads: int = 1
    """onnxruntime intra-op threads; a patch takes about a millisecond, one thread is plenty."""


class SoundClassifier:
    """A ``Listener`` that turns YAMNet scores into ``SoundClass`` events with exact ``audio_ms``.

    Pass ``model`` to share one loaded ``YamNet`` between sessions (it is stateless).
    """

    def __init__(
        self, stamper: Stamper, config: SoundClassConfig | None = None, model: YamNet | None = None
    ) -> None:
        self.stamper = stamper
        self.config = config or SoundClassConfig()
        self.model = model or YamNet(threads=self.config.threads)
        cfg = self.config
        for label, threshold in cfg.thresholds.items():
            if not 0.0 < threshold <= 1.0:
                raise ValueError(f"threshold of {label!r} must be in (0, 1], got {threshold}")
        self._labels = list(cfg.thresholds)
        self._index = np.array([self.model.index(label) for label in self._labels], dtype=np.int64)
        self._thresholds = np.array([cfg.thresholds[label] for label in self._labels], dtype=np.float32)
        self._hop = round(cfg.hop_ms * SAMPLE_RATE / 1000)
        self._onset_delays = [round(ms * SAMPLE_RATE / 1000) for ms in cfg.onset_delays_ms]
        self._repeat = round(cfg.repeat_ms * SAMPLE_RATE / 1000)
        self._tail = round(cfg.tail_ms * SAMPLE_RATE / 1000)
        # The last look at which each label scored over its threshold (for ``tail_ms``).
        self._over_at: dict[str, int] = {}
        self._min_rms = 10.0 ** (cfg.min_rms_db / 20.0)
        self.clock = AudioClock()
        self._ring = np.zeros(PATCH_SAMPLES, dtype=np.float32)
        self._next_tick = self._hop
        # Looks still to come after onsets: (due sample, onset sample, onset id), sorted by due sample.
        self._pending: list[tuple[int, int, str | None]] = []
        self._last_fired: dict[str, int] = {}
        # Onsets the impulse namer has still to name: (onset sample, onset id), oldest first.
        self._unnamed: list[tuple[int, str | None]] = []
        namer = cfg.impulses
        advice = set() if namer is None else {*namer.vetoes, *namer.trust}
        self._advice = {label: self.model.index(label) for label in sorted(advice)}
        overruled = () if namer is None else namer.overruled
        self._overruled_index = {label: self.model.index(label) for label in overruled}
        # Impulses the namer named and still in the window: (onset sample, label).
        self._named: list[tuple[int, str]] = []
        self.windows_classified = 0

    def feed(self, samples: np.ndarray | bytes, sample_rate: int = SAMPLE_RATE) -> list[Event]:
        """Take the next frame of the stream; returns the sound classes recognised in it.

        Raises ``BadInput`` (and keeps its state) for a wrong rate, NaN samples or a malformed frame.
        """
        audio = validate_samples(samples, sample_rate)
        events: list[Event] = []
        start = 0
        while start < audio.size:
            # Cut the frame where the next look is due, so every window ends exactly there.
            due = self._next_due()
            step = audio.size - start if due is None else max(1, due - self.clock.samples)
            stop = min(audio.size, start + step)
            self._push(audio[start:stop])
            start = stop
            events += self._look_if_due()
        return events

    def flush(self) -> list[Event]:
        """End of stream: one last look if onsets are still waiting for theirs."""
        events: list[Event] = [*self.classify_now(self._pending[0][2])] if self._pending else []
        self._pending.clear()
        return events

    def note_onset(self, onset: SoundOnset | float, onset_id: str | None = None) -> list[SoundClass]:
        """Schedule looks ``onset_delays_ms`` after an onset (a ``SoundOnset`` or its ``audio_ms``).

        Looks whose time has already passed happen at once (one for all) and their events are returned;
        the others come from a later ``feed``.
        """
        if isinstance(onset, SoundOnset):
            audio_ms, onset_id = onset.audio_ms, onset.id
        else:
            audio_ms = onset
        if not np.isfinite(audio_ms) or audio_ms < 0:
            raise BadInput("audio_ms", f"onset position must be a finite number >= 0, got {audio_ms!r}")
        at = round(audio_ms * SAMPLE_RATE / 1000)
        if self.config.impulses is not None:
            self._unnamed.append((at, onset_id))
            del self._unnamed[: max(0, len(self._unnamed) - self.config.max_pending_looks)]
        late = False
        for delay in self._onset_delays:
            if at + delay <= self.clock.samples:
                late = True
                continue
            bisect.insort(self._pending, (at + delay, at, onset_id), key=lambda look: look[0])
        # A burst of onsets (applause) must not queue looks without bound: the oldest go first.
        del self._pending[: max(0, len(self._pending) - self.config.max_pending_looks)]
        return self.classify_now(onset_id) if late else []

    def classify_now(self, onset_id: str | None = None) -> list[SoundClass]:
        """Classify the window ending at the current end of the stream, now."""
        if float(np.sqrt(np.mean(np.square(self._ring)))) < self._min_rms:
            return []
        every = self.model.scores(self._ring)
        scores = every[self._index]
        self.windows_classified += 1
        events = []
        names = self._name_impulses(every)
        overruled = self._overruled(every)
        over = {
            label: float(score)
            for label, score, threshold in zip(self._labels, scores, self._thresholds, strict=True)
            if score >= threshold and label not in overruled
        }
        if not self._in_tail(over):
            for label, score in over.items():
                events += self._fire(label, score, onset_id)
        for named, named_onset in names:
            events += self._fire(named.label, named.score, named_onset)
        return events

    def _in_tail(self, over: dict[str, float]) -> bool:
        """Whether this look falls in the fading end of a sound whose label no longer scores over its
        threshold (``tail_ms``); notes the labels that do."""
        now = self.clock.samples
        self._over_at = {label: at for label, at in self._over_at.items() if now - at <= self._tail}
        fading = any(label not in over for label in self._over_at)
        self._over_at.update(dict.fromkeys(over, now))
        return fading

    def _overruled(self, every: np.ndarray) -> set[str]:
        """YAMNet's impulse labels that a name the namer gave an impulse still in this window overrules.

        Where YAMNet is less sure than ``trust`` of "Knock" (or "Clapping", "Finger snapping") while the
        window holds an impulse the spectrum named otherwise, the spectrum wins: YAMNet's quantised scores
        jump to 0.32 on a window's chance mix of claps."""
        namer = self.config.impulses
        if namer is None:
            return set()
        oldest = self.clock.samples - PATCH_SAMPLES
        self._named = [(at, label) for at, label in self._named if at >= oldest]
        given = {label for _, label in self._named}
        return {
            label
            for label in namer.overruled
            if label in self._overruled_index
            and given - {label}
            and float(every[self._overruled_index[label]]) < namer.trust.get(label, 1.0)
        }

    def _fire(self, label: str, score: float, onset_id: str | None) -> list[SoundClass]:
        """A ``SoundClass`` for ``label`` now, unless it fired within ``repeat_ms``."""
        now = self.clock.samples
        if now - self._last_fired.get(label, -self._repeat) < self._repeat:
            return []
        self._last_fired[label] = now
        return [
            self.stamper(
                SoundClass, audio_ms=self.clock.ms(), label=label, score=round(score, 3), onset_id=onset_id
            )
        ]

    def _name_impulses(self, every: np.ndarray) -> list[tuple[Name, str | None]]:
        """Name the onsets whose burst the ring now holds, with this window's scores as YAMNet's advice."""
        namer = self.config.impulses
        if namer is None or not self._unnamed:
            return []
        now = self.clock.samples
        first = now - PATCH_SAMPLES  # the stream position of the ring's first sample
        advice = {label: float(every[i]) for label, i in self._advice.items()}
        names: list[tuple[Name, str | None]] = []
        waiting: list[tuple[int, str | None]] = []
        for at, onset_id in self._unnamed:
            if at + namer.after_samples > now:
                waiting.append((at, onset_id))  # its burst is not all in yet
                continue
            # An onset whose noise has left the ring cannot be measured (shares gives None): YAMNet alone.
            found = shares(self._ring, at - first, namer)
            named = name(found, advice, namer)
            if named is not None:
                names.append((named, onset_id))
                self._named.append((at, named.label))
        self._unnamed = waiting
        return names

    def _next_due(self) -> int | None:
        candidates = [self._pending[0][0]] if self._pending else []
        if self._hop:
            candidates.append(self._next_tick)
        return min(candidates) if candidates else None

    def _push(self, chunk: np.ndarray) -> None:
        n = chunk.size
        if n >= PATCH_SAMPLES:
            self._ring[:] = chunk[-PATCH_SAMPLES:]
        else:
            self._ring[:-n] = self._ring[n:]
            self._ring[-n:] = chunk
        self.clock.advance(n)

    def _look_if_due(self) -> list[SoundClass]:
        now = self.clock.samples
        events: list[SoundClass] = []
        ready = 0
        while ready < len(self._pending) and self._pending[ready][0] <= now:
            ready += 1
        if ready:
            # Looks that fall due together see the same window: one look, named after the earliest onset.
            onset_id = min(self._pending[:ready], key=lambda look: look[1])[2]
            del self._pending[:ready]
            events += self.classify_now(onset_id)
        if self._hop and self._next_tick <= now:
            self._next_tick += self._hop
            # Skip it if an onset look just saw this window, or if an onset already inside the window
            # will get its own look (which carries the onset's id).
            if not ready and not any(at <= now for _, at, _ in self._pending):
                events += self.classify_now()
        return events
