"""Voice-to-voice latency: from the end of the user's spoken question to the first audible sample of the
character's answer at the client, broken down by stage.

    .venv/bin/python benchmarks/voice_to_voice.py [--turns 20] [--seed 1] [--director-toml 'debounce_s = 0.05']
        [--server-toml 'speculative_transcripts = false'] [--candidate-server-toml '']
        [--candidate-director-toml '']

With ``--candidate-server-toml`` (repeatable) the same turns run against another server with those
``[server]`` lines in the same run (the baseline's first, then each candidate's), and a table per candidate
sets it beside the baseline, with the candidate's p50 as a ratio of the baseline's. The n-th
``--candidate-director-toml``, when given, replaces ``--director-toml`` for the n-th candidate.

A real server (``onstage serve``, in its own process), a real local chat-completions endpoint
(``tests/support/llm_server.py``, in this one) that answers at once with a streamed ``say``, so the figure
is onstage's own. One session's microphone streams in real time, 20 ms a frame, room noise between the
questions; each question is Piper speech (trimmed, so where it ends is known to the sample), sent when
the previous answer has been heard out. The end of the speech is when the frame holding its last sample
was sent, less the samples after it in that frame (a microphone hands over a frame once it is recorded);
the answer is heard at the arrival of the first audio-out frame with a non-zero sample, plus that
sample's place in the frame.

The breakdown comes from the server's OpenTelemetry spans (``server/otel.py``; the console exporter,
read from the server's stdout): each stage's time from the end of the speech as the server places it,
and the steps between them; the last row is what the client saw.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # for tests.support

from served import served, session_counters, session_url
from stolen import Stolen

from server.client import SessionClient
from server.demo_audio import noise, speech
from server.media import pcm16
from tests.support.llm_server import Call, LLMServer, Reply

RATE = 16_000
FRAME = 320  # 20 ms
QUESTIONS = (
    "What is your name?",
    "Where do you live?",
    "Can you tell me a joke?",
    "How are you today?",
    "What do you like to eat?",
)
ANSWER = "I am Pip, and I am happy to see you. Ask me anything you like."

STEPS = (
    ("end of turn decided", "turn.speech_end", "turn.ended"),
    ("to the Director's request", "turn.ended", "llm.request"),
    ("LLM reply", "llm.request", "llm.done"),
    ("to the speech cue", "llm.done", "speech.cued"),
    ("first sentence synthesised", "speech.cued", "speech.synthesised"),
    ("to the chunk carrying it", "speech.synthesised", "audio.sent"),
)
HEARD = "first audible sample at the client"
MARKS = ("turn.transcribed", "turn.ended", "llm.request", "llm.first_token", "speech.cued", "audio.sent")


def answer(request: dict[str, Any]) -> Reply:
    """At once: a say for the user's turn, nothing more after the tool results."""
    if request["messages"][-1]["role"] == "tool":
        return Reply(text="")
    return Reply(tool_calls=[Call("say", {"text": ANSWER})], pieces=4)


class Microphone:
    """Streams audio to the session in real time: what is queued, room noise otherwise."""

    def __init__(self, client: SessionClient, seed: int) -> None:
        self.client = client
        self.room = noise(60.0, 0.002, seed=seed)
        self.queued = np.zeros(0, dtype=np.float32)
        self.sent = 0  # samples sent so far
        self.sent_at: list[tuple[int, float]] = []  # (samples sent once a frame went, when it went)
        self._done: asyncio.Event = asyncio.Event()  # set when what was queued has been sent

    async def say(self, audio: np.ndarray) -> float:
        """Send ``audio`` after what is queued; returns when its last sample was recorded."""
        self.queued = np.concatenate([self.queued, audio])
        end = self.sent + self.queued.size
        self._done.clear()
        await self._done.wait()
        return self.time_of(end)

    async def run(self) -> None:
        t0 = time.monotonic()
        frames = 0
        while True:
            if self.queued.size:
                frame, self.queued = self.queued[:FRAME], self.queued[FRAME:]
            else:
                at = self.sent % (self.room.size - FRAME)
                frame = self.room[at : at + FRAME]
            await self.client.send_audio(pcm16(frame))
            self.sent += frame.size
            self.sent_at.append((self.sent, time.monotonic()))
            if not self.queued.size:
                self._done.set()
            frames += 1
            # Paced on the absolute clock: a late frame does not push every later one back.
            await asyncio.sleep(max(0.0, t0 + frames * FRAME / RATE - time.monotonic()))

    def time_of(self, sample: int) -> float:
        """When ``sample`` of the stream was recorded: its frame's send time less what followed it."""
        for total, t in self.sent_at:
            if total >= sample:
                return t - (total - sample) / RATE
        raise ValueError(f"sample {sample} was not sent")


@dataclass
class Turn:
    speech_end: float  # client monotonic time
    heard: float  # the first audible sample of the answer arrived (client monotonic)

    @property
    def e2e_s(self) -> float:
        return self.heard - self.speech_end


def first_audible(client: SessionClient, start: int, rate: int) -> float | None:
    """When the first audible sample of the audio-out frames from the ``start``-th on arrived."""
    for frame in client.received.audio[start:]:
        samples = np.flatnonzero(np.frombuffer(frame.pcm, "<i2"))
        if samples.size:
            return frame.t + samples[0] / rate
    return None


class Spans:
    """The spans a console exporter prints, one JSON object over several lines each."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self._text = ""
        self.arrived = asyncio.Event()

    def take(self, line: str) -> None:
        self._text += line
        if line.rstrip() != "}":
            return
        with contextlib.suppress(json.JSONDecodeError):
            self.spans.append(json.loads(self._text))
            self._text = ""
            self.arrived.set()

    def turns(self) -> list[dict[str, Any]]:
        return [s for s in self.spans if s["name"] == "onstage.turn"]


def wall_s(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


def stage_times(span: dict[str, Any]) -> dict[str, float]:
    """Seconds since the epoch of each stage of a turn span."""
    return {e["name"]: wall_s(e["timestamp"]) for e in span["events"]}


def pct(values: list[float]) -> str:
    a = np.asarray(values) * 1000
    return f"{np.percentile(a, 50):.0f} | {np.percentile(a, 95):.0f}"


async def run(
    args: argparse.Namespace, server_toml: str, director_toml: str
) -> tuple[list[Turn], list[dict[str, float]], float, float, str]:
    rng = random.Random(args.seed)
    # Made before the server starts: Piper here would take the cores from the server it measures.
    questions = [speech(q, sampling_noise=False) for q in QUESTIONS]
    spans = Spans()
    env = {"OTEL_TRACES_EXPORTER": "console", "OTEL_BSP_SCHEDULE_DELAY": "200"}
    turns: list[Turn] = []
    async with LLMServer(default=answer) as llm:
        config = f"""
[server]
{server_toml}

[director]
base_url = "{llm.base_url}"
api_key = "bench"
model = "bench"
{director_toml}
"""
        async with (
            served(config, env=env, stdout=spans.take) as base,
            SessionClient(session_url(base)) as client,
        ):
            started = await client.start(director="llm", seed=args.seed)
            rate = started["audio_out_rate"]
            mic = Microphone(client, args.seed)
            streaming = asyncio.create_task(mic.run())
            wall_offset = time.time() - time.monotonic()
            try:
                await asyncio.sleep(2.0)  # warm-up: the first chunks include loading
                stolen = Stolen()
                for i in range(args.turns):
                    question = rng.choice(questions)
                    since = len(client.received.messages)
                    speech_end = await mic.say(question)
                    # Silence until the answer (the character says nothing else): its first sound is the answer's.
                    audio_from = len(client.received.audio)
                    await client.wait_frame(
                        lambda _, start=audio_from: first_audible(client, start, rate) is not None, 30
                    )
                    heard = first_audible(client, audio_from, rate)
                    assert heard is not None
                    turns.append(Turn(speech_end, heard))
                    print(f"turn {i + 1}: {1000 * turns[-1].e2e_s:.0f} ms", file=sys.stderr)
                    await client.wait_for(
                        lambda m: m.get("type") == "character.speech" and m.get("state") == "ended", 30, since
                    )
                    await asyncio.sleep(1.0)
                async with asyncio.timeout(30):
                    while len(spans.turns()) < len(turns):
                        spans.arrived.clear()
                        await spans.arrived.wait()
                steal = stolen.line(f"the {len(turns)} turns")
                counters = await asyncio.to_thread(session_counters, base)
                on_time = counters["chunks_on_time_total"] / max(1.0, counters["chunks_sent_total"])
            finally:
                streaming.cancel()
    return turns, [stage_times(s) for s in spans.turns()], wall_offset, on_time, steal


def report(
    turns: list[Turn],
    stages: list[dict[str, float]],
    wall_offset: float,
    on_time: float,
    steal: str,
    args: argparse.Namespace,
    server_toml: str,
    director_toml: str,
) -> dict[str, list[float]]:
    """Print one configuration's tables; returns each row's values (seconds) for a comparison."""
    # Each client turn with the server's turn whose speech end is nearest (the clocks are one machine's).
    matched = []
    for turn in turns:
        end = turn.speech_end + wall_offset
        best = min(stages, key=lambda s: abs(s.get("turn.speech_end", 0.0) - end))
        matched.append((turn, best))
    rows: dict[str, list[float]] = {}
    server = " ".join(server_toml.split()) or "defaults"
    print(
        f"## Voice-to-voice, {len(turns)} turns (seed {args.seed}, server: {server}, "
        f"director: {' '.join(director_toml.split()) or 'defaults'})\n"
    )
    print("| from the end of the user's speech (ms) | p50 | p95 |\n|---|---:|---:|")
    for mark in MARKS:
        rows[mark] = [s[mark] - s["turn.speech_end"] for _, s in matched if mark in s]
        print(f"| {mark} (server) | {pct(rows[mark])} |")
    rows[HEARD] = [t.e2e_s for t in turns]
    print(f"| **{HEARD}** | **{pct(rows[HEARD])}** |")
    print("\n| step (ms) | p50 | p95 |\n|---|---:|---:|")
    for name, a, b in STEPS:
        rows[name] = [s[b] - s[a] for _, s in matched if a in s and b in s]
        print(f"| {name} | {pct(rows[name])} |")
    network = [t.heard + wall_offset - s["audio.sent"] for t, s in matched if "audio.sent" in s]
    print(f"| sent to heard at the client | {pct(network)} |")
    placed = [s["turn.speech_end"] - (t.speech_end + wall_offset) for t, s in matched]
    print(f"\nChunks on time: {100 * on_time:.1f} % (a busy machine shows here first). {steal}")
    print(
        f"\nThe server placed the end of speech {pct(placed).replace(' | ', ' ms (p50) / ')} ms (p95) after the client's.\n"
    )
    return rows


def compare(
    baseline: dict[str, list[float]], candidate: dict[str, list[float]], names: tuple[str, str]
) -> None:
    """The two configurations side by side: p50 / p95 each, and the candidate's p50 over the baseline's."""
    print(f"## Baseline ({names[0]}) against candidate ({names[1]}), one run\n")
    print("| ms | baseline p50 / p95 | candidate p50 / p95 | p50 ratio |\n|---|---:|---:|---:|")
    for row, values in baseline.items():
        other = candidate.get(row, [])
        if not values or not other:
            continue
        ratio = (
            np.percentile(other, 50) / np.percentile(values, 50)
            if np.percentile(values, 50) > 0
            else float("nan")
        )
        print(
            f"| {row} | {pct(values).replace(' | ', ' / ')} | {pct(other).replace(' | ', ' / ')} | {ratio:.2f} |"
        )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--director-toml", default="", help="more lines of the [director] table")
    parser.add_argument("--server-toml", default="", help="lines of the [server] table")
    parser.add_argument(
        "--candidate-server-toml",
        action="append",
        default=[],
        help="another server's [server] lines, run after the baseline (repeat for more)",
    )
    parser.add_argument(
        "--candidate-director-toml",
        action="append",
        default=[],
        help="the [director] lines of the candidate of the same place (default: --director-toml)",
    )
    args = parser.parse_args()
    baseline = report(
        *await run(args, args.server_toml, args.director_toml), args, args.server_toml, args.director_toml
    )
    for n, candidate_toml in enumerate(args.candidate_server_toml):
        directed = args.candidate_director_toml
        director_toml = directed[n] if n < len(directed) else args.director_toml
        candidate = report(
            *await run(args, candidate_toml, director_toml), args, candidate_toml, director_toml
        )
        names = (
            " ".join(f"{args.server_toml} {args.director_toml}".split()) or "defaults",
            " ".join(f"{candidate_toml} {director_toml}".split()) or "defaults",
        )
        compare(baseline, candidate, names)


if __name__ == "__main__":
    uvloop.run(main())
