"""The impulse namer on the real recordings, leave one clip out: do its boundaries hold for a clip they did
not see?

    .venv/bin/python benchmarks/impulse_names.py

Every onset the onset detector finds in the three scenes of the real test set (``tests/support/sound_set``)
is measured as the sound classifier measures it (``events.impulse_names.shares``, YAMNet's scores of the
window ending 150 ms after the onset as advice). Each onset belongs to one recording (for a train, the
clip of the impulse nearest to it; for other sounds, the sound). For each recording in turn the two
boundaries are fitted on the onsets of all the others that YAMNet neither vetoes nor names itself
(midway between the classes' extremes, as the defaults were chosen) and the held-out recording's onsets are named with them. Printed per kind: onsets,
named right, named wrong (a false name) and unnamed, left out and fitted on everything (in-sample), with
the boundaries each fold chose. Knocks and claps must get ``Knock`` and ``Clapping`` (applause may get
either); every other kind must get no name from the namer.

The knock recordings are cut from one GCompris recording, so leaving one out still leaves its siblings
in: the knock figures say the boundary holds across raps of one door, not across doors.
"""

from __future__ import annotations

import sys
from collections import Counter, defaultdict
from pathlib import Path

import msgspec
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ is not installed: the repository's

from events.impulse_names import CLAP, KNOCK, ImpulseNameConfig, Shares, name, shares
from events.onset import OnsetDetector
from events.stamp import Stamper
from events.vocabulary import SoundOnset
from events.yamnet import PATCH_SAMPLES, SAMPLE_RATE, YamNet
from tests.support import sound_set

LOOK_MS = 150.0  # the classifier's first look after an onset (SoundClassConfig.onset_delays_ms)
RIGHT = {"knock": {KNOCK}, "clap": {CLAP}, "applause": {CLAP, KNOCK}}


class Onset(msgspec.Struct, frozen=True):
    scene: str
    ms: float
    kind: str
    recording: str
    shares: Shares | None
    advice: dict[str, float]


def onsets(model: YamNet, config: ImpulseNameConfig) -> list[Onset]:
    """Every onset of every scene, measured, with the kind and recording of the sound it falls in."""
    advice = {label: model.index(label) for label in {*config.vetoes, *config.trust}}
    out = []
    for scene_name in sound_set.SCENES:
        scene = sound_set.scene(scene_name)
        detector = OnsetDetector(Stamper("b"))
        found: list[float] = []
        for i in range(0, scene.audio.size, 320):
            found += [
                e.audio_ms for e in detector.feed(scene.audio[i : i + 320]) if isinstance(e, SoundOnset)
            ]
        for ms in found:
            under = [t for t in scene.truth if t.start_ms - 30 <= ms <= t.end_ms]
            if not under:
                kind, recording = "(none)", "(none)"
            else:
                # Under speech, the impulse is what struck; speech alone is speech.
                t = next((u for u in under if u.kind != "speech"), under[0])
                kind, recording = t.kind, t.clip
                if t.impulses_ms:
                    nearest = int(np.argmin([abs(ms - at) for at in t.impulses_ms]))
                    recording = t.clip.split("+")[nearest]
            at = round(ms * SAMPLE_RATE / 1000)
            end = round((ms + LOOK_MS) * SAMPLE_RATE / 1000)
            window = scene.audio[max(0, end - PATCH_SAMPLES) : end]
            window = np.pad(window, (PATCH_SAMPLES - window.size, 0))
            scores = model.scores(window)
            out.append(
                Onset(
                    scene=scene_name,
                    ms=ms,
                    kind=kind,
                    recording=recording,
                    shares=shares(scene.audio, at, config),
                    advice={label: float(scores[i]) for label, i in advice.items()},
                )
            )
    return out


def fit(train: list[Onset], base: ImpulseNameConfig) -> ImpulseNameConfig:
    """Both boundaries midway between the extremes of the classes they part, in ``train``."""
    # Only the onsets that reach the boundaries: YAMNet's vetoes and its confident names decide the others.
    decided = {**base.vetoes, **base.trust}
    measured = [
        o
        for o in train
        if o.shares is not None and not any(o.advice.get(label, 0.0) >= at for label, at in decided.items())
    ]
    knocks = [o.shares.high for o in measured if o.kind == "knock" and o.shares]
    claps = [o.shares.high for o in measured if o.kind == "clap" and o.shares]
    impulse_low = [o.shares.low for o in measured if o.kind in ("knock", "clap") and o.shares]
    other_low = [o.shares.low for o in measured if o.kind not in ("knock", "clap", "applause") and o.shares]
    high = (min(knocks) + max(claps)) / 2 if knocks and claps else base.knock_min_high
    above = [x for x in other_low if x > max(impulse_low, default=1.0)]
    low = (max(impulse_low) + min(above)) / 2 if above else base.max_low
    return msgspec.structs.replace(base, knock_min_high=round(high, 3), max_low=round(low, 3))


def judge(onset: Onset, config: ImpulseNameConfig) -> str:
    """'right', 'wrong' (a false name) or 'unnamed'."""
    named = name(onset.shares, onset.advice, config)
    if named is None:
        return "unnamed"
    return "right" if named.label in RIGHT.get(onset.kind, set()) else "wrong"


def table(results: dict[str, Counter[str]]) -> str:
    lines = ["| kind | onsets | named right | false names | unnamed |", "|---|---|---|---|---|"]
    order = ["knock", "clap", "applause", "footsteps", "music", "speech", "(none)"]
    for kind in sorted(results, key=lambda k: order.index(k) if k in order else len(order)):
        c = results[kind]
        n = sum(c.values())
        right = f"{c['right']}/{n}" if kind in RIGHT else "-"
        lines.append(f"| {kind} | {n} | {right} | {c['wrong']} | {c['unnamed']} |")
    return "\n".join(lines)


def main() -> None:
    base = ImpulseNameConfig()
    every = onsets(YamNet(), base)
    held: dict[str, Counter[str]] = defaultdict(Counter)
    folds = []
    for recording in sorted({o.recording for o in every}):
        config = fit([o for o in every if o.recording != recording], base)
        folds.append((recording, config.knock_min_high, config.max_low))
        for o in every:
            if o.recording == recording:
                held[o.kind][judge(o, config)] += 1
    inside: dict[str, Counter[str]] = defaultdict(Counter)
    for o in every:
        inside[o.kind][judge(o, base)] += 1
    print(f"### Leave one recording out ({len(folds)} folds, {len(every)} onsets)\n\n{table(held)}")
    highs, lows = [f[1] for f in folds], [f[2] for f in folds]
    print(
        f"\nBoundaries chosen: knock_min_high {min(highs):.3f}-{max(highs):.3f}, "
        f"max_low {min(lows):.3f}-{max(lows):.3f} (defaults {base.knock_min_high}, {base.max_low})"
    )
    print(f"\n### The defaults, on every onset (in-sample)\n\n{table(inside)}")


if __name__ == "__main__":
    main()
