"""Speech started by a sound after speech, and speech after speech, with the voice detector's fresh-state
recheck (``VadConfig.recheck_ms``) off and on, in one run.

    .venv/bin/python benchmarks/false_starts.py [--delays 0.8 1.6 3.0]

The real recordings of tests/data/sounds/: each spoken line, then after ``delay`` seconds of the room
each distractor (applause, bells, the doorbell, music, dogs, coughs, a crowd, knocks, claps), in the
quiet room (a distant street at -60 dBFS) and in the fan (a motor at -35 dBFS). The model's state still
holds the speaker when the distractor comes: that is when it scores sounds as speech. A false start is a
speech segment that begins after the line. Speech after speech: each line followed by the next after a
pause of 0.35-1.6 s; for the second line, where its start was placed and when it was published, against
its first sample 40 dB out of the silence.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ is not installed: the repository's

from events.stamp import Stamper
from events.vad import VadConfig, VoiceDetector
from events.vocabulary import SpeechStarted, SpeechStopped
from tests.support import sound_set

RATE = sound_set.RATE
DISTRACTORS = [
    *sound_set.APPLAUSE, "bell_ring", "bell_gong", "bell_desktop", "bell_cowbell", "doorbell", "music_africa",
    "music_america", "dog_bark", "dog_farm", "cough_default", "cough_hillbilly", "crowd_cheer",
    "knock_train3", "clap_pearl", "clap_millo_3",
]  # fmt: skip
ROOMS = {"quiet": ("noise_street", -60.0), "fan": ("noise_motor", -35.0)}
PAUSES_S = (0.35, 0.7, 1.0, 1.6)
PEAK_DB = -8.0
CONFIGS = {"recheck off": VadConfig(recheck_ms=0.0), "recheck on (the default)": VadConfig()}


def heard(
    audio: np.ndarray, config: VadConfig
) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """(placed, published) in ms of each start, and each segment (start, end), fed in 20 ms frames."""
    detector = VoiceDetector(Stamper("b"), config)
    starts, segments = [], []
    for i in range(0, audio.size + 320, 320):
        events = detector.feed(audio[i : i + 320]) if i < audio.size else detector.flush()
        for event in events:
            if isinstance(event, SpeechStarted):
                starts.append((event.audio_ms, detector.position * 1000 / RATE))
            elif isinstance(event, SpeechStopped):
                segments.append((event.audio_ms - event.duration_ms, event.audio_ms))
    return starts, segments


def scene(parts: list[tuple[np.ndarray, float]], room: str) -> tuple[np.ndarray, list[int]]:
    """``parts`` (audio, seconds of room before it) one after another in ``room``; where each begins."""
    noise, level = ROOMS[room]
    total = sum(gap * RATE + a.size for a, gap in parts) + RATE
    audio = sound_set.room(total / RATE, level, noise)
    at, begins = 0, []
    for part, gap in parts:
        at += round(gap * RATE)
        audio[at : at + part.size] += part
        begins.append(at)
        at += part.size
    return np.clip(audio, -1.0, 1.0).astype(np.float32), begins


def false_starts(delays: list[float]) -> dict[str, Counter[str]]:
    out: dict[str, Counter[str]] = {name: Counter() for name in CONFIGS}
    for room in ROOMS:
        for line in sound_set.SPEECH:
            for distractor in DISTRACTORS:
                sound = sound_set.at_peak(distractor, PEAK_DB)
                sound = sound[sound_set.attack(sound, 40.0) :]
                for delay in delays:
                    spoken = sound_set.at_peak(line, PEAK_DB)
                    audio, begins = scene([(spoken, 0.5), (sound, delay)], room)
                    line_end_ms = (begins[0] + spoken.size) * 1000 / RATE
                    for name, config in CONFIGS.items():
                        _, segments = heard(audio, config)
                        out[name][distractor] += sum(1 for start, _ in segments if start > line_end_ms + 100)
    return out


def second_lines() -> dict[str, list[tuple[float, float]]]:
    """Per config, (placed, published) minus the second line's first sample, in ms; (inf, inf) where the
    first line's segment runs on into it (a short pause), NaN where it is missed."""
    out: dict[str, list[tuple[float, float]]] = {name: [] for name in CONFIGS}
    lines = sound_set.SPEECH
    for room in ROOMS:
        for i, first in enumerate(lines):
            second = sound_set.at_peak(lines[(i + 1) % len(lines)], PEAK_DB)
            for pause in PAUSES_S:
                audio, begins = scene([(sound_set.at_peak(first, PEAK_DB), 0.5), (second, pause)], room)
                truth = (begins[1] + sound_set.attack(second, 40.0)) * 1000 / RATE
                for name, config in CONFIGS.items():
                    starts, segments = heard(audio, config)
                    mine = [
                        (placed - truth, published - truth)
                        for placed, published in starts
                        if placed > truth - 250
                    ]
                    joined = any(s0 < truth < s1 for s0, s1 in segments)
                    out[name].append(mine[0] if mine else (np.inf, np.inf) if joined else (np.nan, np.nan))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--delays", type=float, nargs="+", default=[0.8, 1.6, 3.0])
    args = parser.parse_args()
    counts = false_starts(args.delays)
    trials = len(ROOMS) * len(sound_set.SPEECH) * len(args.delays)
    names = list(CONFIGS)
    print(f"### Speech started by a sound after a line ({trials} trials per sound)\n")
    print("| sound | " + " | ".join(names) + " |\n|---|" + "---:|" * len(names))
    for distractor in DISTRACTORS:
        print(f"| {distractor} | " + " | ".join(str(counts[n][distractor]) for n in names) + " |")
    print("| **all** | " + " | ".join(f"**{sum(counts[n].values())}**" for n in names) + " |")
    timings = second_lines()
    print(f"\n### The second of two lines ({len(timings[names[0]])} pairs, pauses {PAUSES_S} s)\n")
    print(
        "| config | missed | one segment with the first | placed median / max abs ms "
        "| published median / p95 / max ms |\n|---|---:|---:|---|---|"
    )
    for name in names:
        rows = np.array(timings[name])
        ok = rows[np.isfinite(rows[:, 0])]
        missed, joined = int(np.isnan(rows[:, 0]).sum()), int(np.isinf(rows[:, 0]).sum())
        print(
            f"| {name} | {missed} | {joined} | {np.median(ok[:, 0]):.0f} / {np.abs(ok[:, 0]).max():.0f} "
            f"| {np.median(ok[:, 1]):.0f} / {np.percentile(ok[:, 1], 95):.0f} / {ok[:, 1].max():.0f} |"
        )
    off = np.array(timings[names[0]])[:, 1]
    for name in names[1:]:
        on = np.array(timings[name])[:, 1]
        both = np.isfinite(off) & np.isfinite(on)
        later = on[both] - off[both]
        print(
            f"\n{name}: published later than without the recheck {int((later > 0).sum())} of {int(both.sum())}, "
            f"by at most {np.max(later, initial=0.0):.0f} ms"
        )


if __name__ == "__main__":
    main()
