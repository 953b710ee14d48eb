"""CPU time of each listener per second of audio, on one thread.

    .venv/bin/python benchmarks/listeners.py [--seconds 60] [--frame-ms 20] [--wav FILE]

The audio is a mixed minute by default: Piper sentences, knocks, claps and pauses over quiet room noise
(``tests/sounds.py``, so the ``speech`` extra must be installed), or the first ``--seconds`` of ``--wav``.
Each listener is fed that audio in ``--frame-ms`` frames, as a client sends it, and every ``feed`` is timed
with ``time.process_time_ns`` (CPU time, so other processes on the machine do not count, though they still
slow a shared core down). torch and onnxruntime run on one thread. The table gives the median and p99
cost of one frame and the total as a share of real time (goal: VAD + onset + levels under 2 %).

Colleague listeners are added when their modules import: ``events.sound_classes.SoundClassifier`` (fed the
same frames, told of each onset the onset detector found) and ``events.transcriber.Transcriber`` (run on
each speech segment the VAD cut, so its row is per segment, not per frame).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from events.audio import SAMPLE_RATE
from events.ears import Ears, read_wav
from events.levels import LevelMeter
from events.onset import OnsetDetector
from events.stamp import Stamper
from events.turn import TurnDetector
from events.vad import VoiceDetector
from events.vocabulary import SoundOnset, SpeechStopped

SENTENCES = [
    "Hello there, how are you doing today?",
    "Please tell me a story about a dragon.",
    "Can you wave at me? I would like to see that.",
    "Stop! Wait a second, I have an idea.",
]


def mixed_audio(seconds: float) -> np.ndarray:
    """Blocks of 10 s: a sentence, knocks, a sentence, claps, pauses; quiet room noise throughout."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ is not installed: the repository's
    from tests import sounds

    spoken = [sounds.speech(text) for text in SENTENCES]
    knocks, _ = sounds.knocks(3)
    claps = np.concatenate([np.concatenate([sounds.clap(i), sounds.silence(0.25)]) for i in range(4)])
    blocks = []
    for i in range(max(1, round(seconds / 10))):
        block = sounds.noise(10.0, 0.003, seed=i)
        block, _ = sounds.place(block, spoken[(2 * i) % len(spoken)], 0.3)
        block, _ = sounds.place(block, knocks, 3.5)
        block, _ = sounds.place(block, spoken[(2 * i + 1) % len(spoken)], 4.8)
        block, _ = sounds.place(block, claps, 8.0)
        blocks.append(block)
    return np.concatenate(blocks)[: round(seconds * SAMPLE_RATE)]


class Row:
    """One listener's costs: CPU ns of each timed call, and the audio seconds they covered."""

    def __init__(self, name: str, costs: list[int], audio_s: float, unit: str = "frame") -> None:
        self.name, self.costs, self.audio_s, self.unit = (
            name,
            np.array(costs, dtype=np.float64),
            audio_s,
            unit,
        )

    def cells(self) -> list[str]:
        ms_per_s = self.costs.sum() / 1e6 / self.audio_s
        median, p99 = np.percentile(self.costs, [50, 99]) / 1e3 if self.costs.size else (0.0, 0.0)
        return [
            self.name,
            f"{self.costs.size} {self.unit}s",
            f"{median:,.1f}",
            f"{p99:,.1f}",
            f"{ms_per_s:.2f}",
            f"{ms_per_s / 10:.3f} %",
        ]


def timed(feed: Callable[[np.ndarray], Any], frames: list[np.ndarray]) -> tuple[list[int], list[Any]]:
    costs, outputs = [], []
    clock = time.process_time_ns
    for frame in frames:
        t0 = clock()
        out = feed(frame)
        costs.append(clock() - t0)
        outputs.append(out)
    return costs, outputs


def optional(module: str, name: str) -> Any | None:
    """A colleague's class if its module imports, else None."""
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None


def sound_classes_row(
    frames: list[np.ndarray], onsets: list[list[SoundOnset]], audio_s: float, namer: bool = True
) -> Row | None:
    """The classifier's cost; ``namer=False`` without the impulse namer (``SoundClassConfig.impulses``)."""
    classifier_type = optional("events.sound_classes", "SoundClassifier")
    if classifier_type is None:
        return None
    config_type = optional("events.sound_classes", "SoundClassConfig")
    config = None if namer or config_type is None else config_type(impulses=None)
    classifier = classifier_type(Stamper("bench"), config)
    clock, costs = time.process_time_ns, []
    for frame, found in zip(frames, onsets, strict=True):
        t0 = clock()
        classifier.feed(frame)
        for onset in found:
            classifier.note_onset(onset)
        costs.append(clock() - t0)
    return Row(
        "sound classes (YAMNet + impulse namer)" if namer else "sound classes (YAMNet alone)", costs, audio_s
    )


def transcriber_row(audio: np.ndarray, segments: list[SpeechStopped], audio_s: float) -> Row | None:
    transcriber_type = optional("events.transcriber", "Transcriber")
    if transcriber_type is None or not segments:
        return None
    transcriber = transcriber_type()
    try:
        transcriber.load()
    except ImportError:  # the speech extra (faster-whisper and its model) is not installed
        return None
    pad = round(0.15 * SAMPLE_RATE)  # as the transcriber's SegmentRecorder pads a segment
    cuts = []
    for stop in segments:
        start = round((stop.audio_ms - stop.duration_ms) * SAMPLE_RATE / 1000)
        end = round(stop.audio_ms * SAMPLE_RATE / 1000)
        cuts.append(audio[max(0, start - pad) : end + pad])
    costs, _ = timed(transcriber.transcribe, cuts)
    return Row("transcriber (Whisper tiny.en)", costs, audio_s, unit="segment")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--frame-ms", type=float, default=20.0)
    parser.add_argument("--wav", type=Path, help="benchmark on this file instead of the mixed minute")
    args = parser.parse_args()

    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:
        pass
    audio = read_wav(args.wav)[: round(args.seconds * SAMPLE_RATE)] if args.wav else mixed_audio(args.seconds)
    audio_s = audio.size / SAMPLE_RATE
    step = round(args.frame_ms * SAMPLE_RATE / 1000)
    frames = [audio[i : i + step] for i in range(0, audio.size, step)]

    stamp = Stamper("bench")
    rows = []
    vad_costs, vad_out = timed(VoiceDetector(stamp).feed, frames)
    rows.append(Row("VAD (silero ONNX)", vad_costs, audio_s))
    onset_costs, onset_out = timed(OnsetDetector(stamp).feed, frames)
    rows.append(Row("onset", onset_costs, audio_s))
    level_costs, _ = timed(LevelMeter(stamp).feed, frames)
    rows.append(Row("levels (+ pitch)", level_costs, audio_s))
    together = [a + b + c for a, b, c in zip(vad_costs, onset_costs, level_costs, strict=True)]
    rows.append(Row("**VAD + onset + levels**", together, audio_s))
    turn, turn_costs = TurnDetector(stamp), []
    for frame, heard in zip(frames, vad_out, strict=True):
        t0 = time.process_time_ns()
        for event in heard:
            turn.observe(event)
        turn.feed(frame)
        turn.poll()
        turn_costs.append(time.process_time_ns() - t0)
    rows.append(Row("end of turn", turn_costs, audio_s))
    pcm = [(np.clip(f, -1, 1 - 1 / 32768) * 32768).astype("<i2").tobytes() for f in frames]
    ears_costs, _ = timed(Ears(Stamper("bench")).feed, pcm)
    rows.append(Row("Ears: PCM16 in, all of the above", ears_costs, audio_s))

    onsets = [[e for e in out if isinstance(e, SoundOnset)] for out in onset_out]
    segments = [e for out in vad_out for e in out if isinstance(e, SpeechStopped)]
    heavy = (
        sound_classes_row(frames, onsets, audio_s, namer=False),
        sound_classes_row(frames, onsets, audio_s),
        transcriber_row(audio, segments, audio_s),
    )
    for row in heavy:
        if row is not None:
            rows.append(row)

    load = os.getloadavg()[0]
    print(f"{audio_s:.0f} s of audio in {args.frame_ms:g} ms frames; {os.cpu_count()} cores, load {load:.1f}")
    print(f"speech segments: {len(segments)}, onsets: {sum(map(len, onsets))}\n")
    header = ["listener", "timed", "median µs", "p99 µs", "CPU ms per s of audio", "share of real time"]
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|")
    for row in rows:
        print("| " + " | ".join(row.cells()) + " |")


if __name__ == "__main__":
    main()
