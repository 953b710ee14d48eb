"""What the ears heard in a scene of the real test set, scored against its truth, per sound kind.

- onset found: a ``SoundOnset`` within ``ONSET_EARLY_MS`` before to ``ONSET_LATE_MS`` after the first
  impulse of a knock or clap (train);
- named: a ``SoundClass`` whose window (the 0.975 s ending at its ``audio_ms``) overlaps the sound, with a
  label that ``sound_set.EXPECTED`` accepts for its kind; a label it does not accept is a false name, and
  so is any label on a window that overlaps no placed sound;
- speech: a speech segment (``SpeechStarted`` .. ``SpeechStopped``) that overlaps no spoken line is speech
  started on whatever it overlaps; a line that no segment overlaps is speech missed.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence

import msgspec

from events.ears import Ears, EarsConfig
from events.hearing import Hearing
from events.stamp import Stamper
from events.vocabulary import Event, SoundClass, SoundOnset, SpeechStarted, SpeechStopped
from tests.support.sound_set import EXPECTED, IMPULSIVE, Scene, Truth

ONSET_EARLY_MS = 30.0
ONSET_LATE_MS = 80.0
WINDOW_MS = 975.0
FRAME = 320  # 20 ms frames, as a client sends them


class KindScore(msgspec.Struct, kw_only=True):
    """The figures of one sound kind (over one or more scenes)."""

    count: int = 0
    alone: int = 0
    """Knocks and claps not under speech."""
    onsets: int = 0
    """Of those not under speech, how many got an onset."""
    onsets_under_speech: int = 0
    under_speech: int = 0
    named: int = 0
    false_names: Counter[str] = msgspec.field(default_factory=Counter)
    speech_started: int = 0
    speech_missed: int = 0
    start_errors_ms: list[float] = msgspec.field(default_factory=list)
    end_errors_ms: list[float] = msgspec.field(default_factory=list)


def is_its_onset(t: Truth, at_ms: float) -> bool:
    """Whether an onset at ``at_ms`` is the one of the knock or clap (train) ``t``: from ``ONSET_EARLY_MS``
    before its first impulse to ``ONSET_LATE_MS`` after it."""
    first = t.impulses_ms[0]
    return first - ONSET_EARLY_MS <= at_ms <= first + ONSET_LATE_MS


def hear(scene: Scene, hearing: Hearing, config: EarsConfig | None = None) -> list[Event]:
    """Everything the ears (with the sound classifier) hear in a scene, fed in 20 ms frames."""
    stamper = Stamper("set")
    cfg = config if config is not None else EarsConfig(levels=None, turn=None)
    ears = Ears(stamper, cfg, hearing.listeners(stamper, threaded=False))
    events: list[Event] = []
    try:
        for i in range(0, scene.audio.size, FRAME):
            events += ears.feed(scene.audio[i : i + FRAME])
        events += ears.flush()
    finally:
        ears.close()
    return events


def segments(events: Iterable[Event]) -> list[tuple[float, float]]:
    """The speech segments, as (start, end) in ms."""
    return [(e.audio_ms - e.duration_ms, e.audio_ms) for e in events if isinstance(e, SpeechStopped)]


def _overlaps(a0: float, a1: float, t: Truth) -> bool:
    return a0 < t.end_ms and t.start_ms < a1


def score(
    scene: Scene, events: Sequence[Event], into: dict[str, KindScore] | None = None
) -> dict[str, KindScore]:
    """Per kind, what was found; ``"(none)"`` holds names and speech where no sound was placed."""
    out: dict[str, KindScore] = into if into is not None else defaultdict(KindScore)
    onsets = [e.audio_ms for e in events if isinstance(e, SoundOnset)]
    classes = [e for e in events if isinstance(e, SoundClass)]
    spoken = segments(events)
    started = [e for e in events if isinstance(e, SpeechStarted)]
    assert len(started) >= len(spoken)
    for t in scene.truth:
        row = out[t.kind]
        row.count += 1
        if t.kind in IMPULSIVE:
            hit = any(is_its_onset(t, at) for at in onsets)
            if t.under_speech:
                row.under_speech += 1
                row.onsets_under_speech += hit
            else:
                row.alone += 1
                row.onsets += hit
        names = [c.label for c in classes if _overlaps(c.audio_ms - WINDOW_MS, c.audio_ms, t)]
        row.named += any(label in EXPECTED.get(t.kind, ()) for label in names)
        if t.kind == "speech":
            mine = [s for s in spoken if _overlaps(s[0], s[1], t)]
            row.speech_missed += not mine
            if mine:
                row.start_errors_ms.append(mine[0][0] - t.start_ms)
                row.end_errors_ms.append(mine[-1][1] - t.end_ms)
    for c in classes:
        under = [t for t in scene.truth if _overlaps(c.audio_ms - WINDOW_MS, c.audio_ms, t)]
        if not any(c.label in EXPECTED.get(t.kind, ()) for t in under):
            # A false name is charged to the sound that fills most of its window (or to no sound).
            kind = (
                max(
                    under, key=lambda t: min(t.end_ms, c.audio_ms) - max(t.start_ms, c.audio_ms - WINDOW_MS)
                ).kind
                if under
                else "(none)"
            )
            out[kind].false_names[c.label] += 1
    for s0, s1 in spoken:
        under = [t for t in scene.truth if _overlaps(s0, s1, t)]
        if not any(t.kind == "speech" for t in under):
            out[under[0].kind if under else "(none)"].speech_started += 1
    return out
