"""Turns ended too soon, against how soon a turn ends: the voice detector's stop on real read speech.

    .venv/bin/python benchmarks/turn_ends.py [--min-silence 300 250 200] [--cache DIR] [--limit N]

The end of a turn waits for the voice detector's stop (``VadConfig.min_silence_ms`` of silence, counted
from the model's first silent window, about 115 ms after the voice ends) and, for a finished sentence,
no longer (``server_turn``: ``punctuated_silence_ms`` 0). A shorter stop ends every turn sooner, and cuts
more speakers off between two of their sentences. This measures both on real recordings: the English
prompts of Asterisk's core sounds (``asterisk-core-sounds-en-g722``, Allison Smith, CC-BY-SA-3.0), one
speaker reading instructions in sentences with pauses of 150-450 ms between them. Every prompt of 2 s
or more with a pause of 150 ms or more inside it (10 ms frames 35 dB under its peak) is laid into a
distant street (-50 dBFS) and heard by the ears as a session hears them (the voice detector, Whisper
speculating at each silence, the turn detector as the server sets it), fed 20 ms frames. Per
``--min-silence`` value (the first is the baseline): the turns that ended before the prompt did
(the speaker cut off), the prompts that had one, and when the turn ended after the prompt's last sample
(p50 / p95), as a ratio of the baseline's in the same run.

The package is downloaded once into ``--cache`` (``apt-get download``, as ``scripts/build_sound_set.py``
does); nothing is committed from it.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np
from scipy.signal import resample_poly

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the repository's
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))  # the sound set's set-up script

from events.ears import Ears, EarsConfig
from events.hearing import Hearing
from events.stamp import Stamper
from events.vad import VadConfig
from events.vocabulary import EndOfTurn
from server.demo_audio import trim
from server.sessions import server_turn
from tests.support import sound_set

RATE = 16_000
FRAME = 320  # 20 ms, as a microphone sends
PACKAGE = "asterisk-core-sounds-en-g722"
PROMPTS = "usr/share/asterisk/sounds/en_US_f_Allison"
MIN_PROMPT_S = 2.0
MIN_PAUSE_MS = 150
QUIET_DB = 35.0  # a 10 ms frame this far under the prompt's loudest is a pause
LEAD_S, TAIL_S = 0.8, 2.0  # the room before and after each prompt
ROOM_DB = -50.0


def trimmed(audio: np.ndarray) -> np.ndarray:
    """The prompt from its first to its last sample within 40 dB of its peak, peak at -6 dBFS."""
    audio = trim(audio, threshold=0.01 * float(np.abs(audio).max()))
    return (audio * (10 ** (-6 / 20) / np.abs(audio).max())).astype(np.float32)


def longest_pause_ms(audio: np.ndarray) -> int:
    """The longest run of quiet 10 ms frames inside the prompt."""
    frames = audio[: audio.size // 160 * 160].reshape(-1, 160)
    db = 10 * np.log10(np.mean(frames**2, axis=1) + 1e-12)
    quiet = db < db.max() - QUIET_DB
    loud = np.flatnonzero(~quiet)
    longest = run = 0
    for q in quiet[loud[0] : loud[-1] + 1]:
        run = run + 1 if q else 0
        longest = max(longest, run)
    return longest * 10


def prompts(cache: Path, limit: int | None) -> dict[str, np.ndarray]:
    """The prompts that have a pause inside them, by name."""
    from build_sound_set import decode, unpack  # scripts/, on the path above: set-up's, not the package's

    tree, _ = unpack(PACKAGE, cache)
    out: dict[str, np.ndarray] = {}
    for path in sorted((tree / PROMPTS).glob("*.g722")):
        audio, rate = decode(path.read_bytes(), ".g722")
        if rate != RATE:
            audio = resample_poly(audio, RATE, rate).astype(np.float32)
        audio = trimmed(audio)
        if audio.size >= MIN_PROMPT_S * RATE and longest_pause_ms(audio) >= MIN_PAUSE_MS:
            out[path.stem] = audio
        if limit is not None and len(out) == limit:
            break
    return out


def turn_ends(audio: np.ndarray, vad: VadConfig, hearing: Hearing) -> list[int]:
    """Where (samples fed) each turn ended, ``audio`` laid into the room."""
    lead = round(LEAD_S * RATE)
    room = sound_set.room(LEAD_S + audio.size / RATE + TAIL_S, ROOM_DB, "noise_street")
    room[lead : lead + audio.size] += audio
    stamp = Stamper("turns")
    config = EarsConfig(vad=vad, turn=server_turn(), onset=None, levels=None)
    ears = Ears(stamp, config, extra=hearing.listeners(stamp, threaded=False))
    ends: list[int] = []
    for at in range(0, room.size, FRAME):
        events = ears.feed(room[at : at + FRAME])
        ends += [at + FRAME - lead for e in events if isinstance(e, EndOfTurn)]
    return ends


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--min-silence", type=float, nargs="+", default=[300.0, 250.0, 200.0])
    parser.add_argument(
        "--cache", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "onstage-sound-debs"
    )
    parser.add_argument("--limit", type=int, default=None, help="the first N prompts only")
    args = parser.parse_args()
    clips = prompts(args.cache, args.limit)
    hearing = Hearing(sounds=None)
    hearing.load()
    print(f"{len(clips)} prompts, {sum(a.size for a in clips.values()) / RATE:.0f} s of speech\n")
    print(
        "| min_silence_ms | turns ended inside a prompt | prompts cut | turn end after speech p50 / p95 ms | p50 ratio |"
    )
    print("|---:|---:|---:|---:|---:|")
    base: float | None = None
    for ms in args.min_silence:
        vad = VadConfig(min_silence_ms=ms)
        early = cut = 0
        after: list[float] = []
        for audio in clips.values():
            ends = turn_ends(audio, vad, hearing)
            inside = sum(end < audio.size for end in ends)
            early += inside
            cut += inside > 0
            after += [(end - audio.size) * 1000 / RATE for end in ends if end >= audio.size][:1]
        p50, p95 = np.percentile(after, [50, 95])
        base = p50 if base is None else base
        print(f"| {ms:.0f} | {early} | {cut} / {len(clips)} | {p50:.0f} / {p95:.0f} | {p50 / base:.2f} |")
    hearing.close()


if __name__ == "__main__":
    main()
