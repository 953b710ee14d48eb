"""The ears on the real-recording test set: per sound kind, onsets found, right names, false names, speech.

    .venv/bin/python benchmarks/sounds.py [--scene quiet|speech|fan ...]

The scenes are mixed from the real clips in tests/data/sounds/ (``tests/support/sound_set.py``) and
heard by the ears as a live session hears them: the voice detector, the onset detector and the sound
classifier (YAMNet looking after every onset and every 240 ms), fed 20 ms frames. Scored by
``tests/support/hearing_score.py``. Goals (issue 15): onsets for >= 90 % of knocks and claps not under
speech, a right name for >= 70 % of knocks, claps and doorbells, no false names, speech missed 0,
speech started on a non-speech sound 0.

Also how soon each knock's and clap's onset is told (from its first impulse to the end of the 20 ms frame
that brings the event), with the onset detector as served and judging every candidate over its full span
(``early_ms = confirm_ms``: the detector before 2026-12-08), in the same run.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ is not installed: the repository's

from events.hearing import Hearing
from events.onset import OnsetConfig, OnsetDetector
from events.stamp import Stamper
from events.vocabulary import SoundOnset
from tests.support import sound_set
from tests.support.hearing_score import FRAME, KindScore, hear, is_its_onset, score


def pct(n: int, of: int) -> str:
    return f"{n}/{of} ({100 * n / of:.0f} %)" if of else "-"


def table(scores: dict[str, KindScore]) -> str:
    head = "| kind | sounds | onset found (alone) | onset under speech | right name | false names | speech started on it | speech missed |"
    lines = [head, "|---" * 8 + "|"]
    order = [
        "knock",
        "clap",
        "applause",
        "doorbell",
        "speech",
        "bell",
        "footsteps",
        "cough",
        "music",
        "dog",
        "crowd",
        "(none)",
    ]
    for kind in sorted(scores, key=lambda k: order.index(k) if k in order else len(order)):
        s = scores[kind]
        impulsive = kind in sound_set.IMPULSIVE
        named = kind in sound_set.NAMED or kind in sound_set.EXPECTED
        false = ", ".join(f"{label} x{n}" for label, n in s.false_names.most_common()) or "0"
        lines.append(
            f"| {kind} | {s.count or '-'} | {pct(s.onsets, s.alone) if impulsive else '-'} "
            f"| {pct(s.onsets_under_speech, s.under_speech) if impulsive else '-'} "
            f"| {pct(s.named, s.count) if named and s.count else '-'} | {false} "
            f"| {s.speech_started if kind != 'speech' else '-'} | {s.speech_missed if kind == 'speech' else '-'} |"
        )
    return "\n".join(lines)


def onsets_told_after(scene: sound_set.Scene, config: OnsetConfig) -> dict[str, list[float]]:
    """Per impulsive kind, ms from the first impulse of each knock or clap not under speech to the end of
    the frame that told its onset (those that got one)."""
    detector = OnsetDetector(Stamper("told"), config)
    told: list[tuple[float, float]] = []  # (audio_ms, told at)
    for i in range(0, scene.audio.size, FRAME):
        now = (i + FRAME) * 1000.0 / sound_set.RATE
        told += [
            (e.audio_ms, now) for e in detector.feed(scene.audio[i : i + FRAME]) if isinstance(e, SoundOnset)
        ]
    out: dict[str, list[float]] = defaultdict(list)
    for t in scene.truth:
        if t.kind in sound_set.IMPULSIVE and not t.under_speech:
            hits = [now for at, now in told if is_its_onset(t, at)]
            out[t.kind] += [hits[0] - t.impulses_ms[0]] if hits else []
    return out


def told_table(scenes: list[str]) -> str:
    """Onsets told after their sound, as served and over the full span, ms: median (max), and the ratio."""
    served, full = OnsetConfig(), OnsetConfig(early_ms=OnsetConfig().confirm_ms)
    after: dict[OnsetConfig, dict[str, list[float]]] = {
        config: defaultdict(list) for config in (served, full)
    }
    for name in scenes:
        for config, by_kind in after.items():
            for kind, ms in onsets_told_after(sound_set.scene(name), config).items():
                by_kind[kind] += ms
    lines = [
        "| kind | onsets | served: median (max) ms | full span: median (max) ms | served / full (median) |",
        "|---|---:|---:|---:|---:|",
    ]
    for kind in sound_set.IMPULSIVE:
        a, b = np.array(after[served][kind]), np.array(after[full][kind])
        lines.append(
            f"| {kind} | {a.size} | {np.median(a):.0f} ({a.max():.0f}) | {np.median(b):.0f} ({b.max():.0f}) "
            f"| {np.median(a) / np.median(b):.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scene", action="append", choices=list(sound_set.SCENES))
    args = parser.parse_args()
    hearing = Hearing(transcripts=None)
    total: dict[str, KindScore] = defaultdict(KindScore)
    scenes = args.scene or list(sound_set.SCENES)
    for name in scenes:
        scene = sound_set.scene(name)
        events = hear(scene, hearing)
        scores = score(scene, events)
        score(scene, events, total)
        print(f"\n### {name} ({scene.audio.size / sound_set.RATE:.0f} s)\n\n{table(scores)}")
    print(f"\n### all scenes\n\n{table(total)}")
    speech = total.get("speech")
    if speech is not None and speech.start_errors_ms:
        start, end = np.abs(speech.start_errors_ms), np.abs(speech.end_errors_ms)
        print(
            f"\nspeech edges vs the line's first/last sample: start median {np.median(start):.0f} ms "
            f"(max {start.max():.0f}), end median {np.median(end):.0f} ms (max {end.max():.0f})"
        )
    print(f"\n### onsets told after their sound's first impulse (20 ms frames)\n\n{told_table(scenes)}")


if __name__ == "__main__":
    main()
