"""Event-to-reaction latency of a live session, measured at the client over a real WebSocket.

    .venv/bin/python benchmarks/reaction.py                      # starts `onstage serve` for the run
    .venv/bin/python benchmarks/reaction.py --rounds 10          # more inputs per kind
    .venv/bin/python benchmarks/reaction.py --kinds knock clap --rounds 40   # some kinds only
    .venv/bin/python benchmarks/reaction.py --sounds synthetic   # the sounds made here (before 2026-12-07)
    .venv/bin/python benchmarks/reaction.py --url ws://127.0.0.1:8765/v1/session
    .venv/bin/python benchmarks/reaction.py --minutes 10         # the long run: timing and A/V offset
    .venv/bin/python benchmarks/reaction.py --kinds knock clap --foresee both  # onsets foreseen, and not

Reaction: from sending an input to receiving the first video frame whose ``reflects`` names its event.
For gestures and text the event id comes from ``input.accepted``; for sounds played into the microphone
(speech, claps, knocks) from ``input.speech_started`` / ``input.sound`` (the first ``onset``), and the
clock starts when the audio frame holding the sound's start was sent. The sounds are the real recordings
of ``tests/data/sounds`` in turn (every knock and knock train, every clap, every speaker's first two
seconds), placed at the level of the test scenes; a sound starts where ``sound_set.start`` says (a
knock or clap at its rise, speech where it stands out of the silence). ``--sounds synthetic`` plays one
knock train, clap and Piper line made here instead. Each input is sent a
delay after the last frame of a given chunk arrived: users do not time their inputs to the media clock, so
the delays are spread uniformly over one chunk (seeded, so a run repeats). The first input of each kind
goes in with no delay, the worst moment (the next chunk is already generated; the reaction lands one chunk
later); ``--phase worst`` sends every input that way.

The clock (frames per second, frames per chunk) is the one each session's ``session.started`` names.

Determinism: one session per input kind whose first input goes in after 4 s, and one reference
session with the same seed and no input at all. Frames before the reacting frame must be byte-identical
to the reference, and the reacting frame must differ. A second reference session shows where runs
without any input already differ; a verdict past that point is marked inconclusive.

``--minutes N``: one session of N minutes with an input every ``--gap`` chunks (kinds in turn). Reports
the share of chunks on time (the server's own count, and arrival at the client within one chunk of the
media clock), the frame rate in 1-second windows (share of windows within half a frame of the session's
fps: >= 23.5 fps at 24), and the offset
between the character's voice and its mouth (the voice's per-frame loudness cross-correlated with the
mouth openness that ``streaming_model.probes`` reads from the pixels).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from served import served, session_counters, session_url
from stolen import Stolen

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ is not installed: the repository's

from server import demo_audio
from server.client import Received, SessionClient, VideoFrame
from server.client_cli import FRAME_S, FRAME_SAMPLES, percentiles
from server.core.lipsync import MAX_LAG_FRAMES, MIN_CORRELATION, best_lag
from server.media import MediaClock
from tests.support import sound_set

KINDS = ("speech", "clap", "knock", "gesture", "text")
AUDIO_EVENT = {"speech": "input.speech_started", "clap": "input.sound", "knock": "input.sound"}
FIRST_S = 4.0  # the first input goes in after the chunk that ends here: the greeter plan has said hello


def first_chunk(clock: MediaClock) -> int:
    """The chunk after which the first input goes in (chunk 24 at 24 fps with 4-frame chunks)."""
    return round(FIRST_S / clock.chunk_s)


def delays(seed: int, n: int, phase: str) -> list[float]:
    """When to send each of n inputs after a chunk's last frame, in chunks: the first at the worst moment
    (0), the rest uniform over one chunk, or all 0 for ``phase == "worst"``."""
    spread = np.random.default_rng(seed).uniform(0.0, 1.0, n) * (phase == "random")
    return [0.0, *spread[1:].tolist()][:n]


def nth(audio: dict[str, list[Sound]], kind: str, i: int) -> Sound | None:
    """The sound of the ``i``th input of ``kind`` (None for kinds that are not sounds)."""
    played = audio.get(kind)
    return played[i % len(played)] if played else None


def clock_of(client: SessionClient) -> MediaClock:
    """The media clock the session's ``session.started`` names."""
    (started,) = client.received.of_type("session.started")
    return MediaClock(started["fps"], started["chunk_frames"])


REAL_CLIPS = {
    "speech": sound_set.SPEECH,
    "clap": sound_set.CLAPS,
    "knock": ["knock_a", "knock_b", "knock_c", "knock_train3"],
}
PEAK_DB = {"speech": -6.0, "clap": -8.0, "knock": -8.0}  # as the real-recording test scenes place them
# A line is cut here (10 ms fade): its start is what is measured, and the next input is 2.5 s on.
SPEECH_S = 2.0


@dataclass(frozen=True)
class Sound:
    """One sound to play into the microphone."""

    name: str
    pcm: np.ndarray
    """int16 samples at 16 kHz."""
    begins: int
    """The sample where the sound starts: the clock starts when the audio frame holding it is sent."""


def pcm16(audio: np.ndarray) -> np.ndarray:
    return (np.clip(audio, -1.0, 1.0 - 1 / 32768) * 32768.0).astype("<i2")


def real(kind: str, name: str) -> Sound:
    """A committed recording as the microphone plays it."""
    audio = sound_set.at_peak(name, PEAK_DB[kind])
    if kind == "speech":
        audio = audio[: round(SPEECH_S * sound_set.RATE)].copy()
        fade = round(0.01 * sound_set.RATE)
        audio[-fade:] *= np.linspace(1.0, 0.0, fade, dtype=np.float32)
    return Sound(name, pcm16(audio), sound_set.start(audio, kind))


def sounds(source: str) -> dict[str, list[Sound]]:
    """What each audio kind plays into the microphone, in turn: the real recordings, or ``synthetic``."""
    if source == "real":
        return {kind: [real(kind, name) for name in names] for kind, names in REAL_CLIPS.items()}
    made = {
        "speech": demo_audio.speech("Hello there, can you hear me?", sampling_noise=False),
        "clap": demo_audio.claps(n=2)[0],
        "knock": demo_audio.knocks(n=3)[0],
    }
    return {kind: [Sound(f"synthetic {kind}", pcm16(audio), 0)] for kind, audio in made.items()}


class Microphone:
    """Streams silence in real-time 20 ms frames; ``play`` puts a sound into the stream at the next frame."""

    def __init__(self, client: SessionClient) -> None:
        self.client = client
        self.frames_sent = 0
        self._queue: list[tuple[np.ndarray, asyncio.Future[tuple[float, float]]]] = []
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Microphone:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    def play(self, sound: np.ndarray) -> asyncio.Future[tuple[float, float]]:
        """Resolves to (send time of the sound's first frame, its position in the sent audio in ms)."""
        future: asyncio.Future[tuple[float, float]] = asyncio.get_running_loop().create_future()
        self._queue.append((sound, future))
        return future

    async def _run(self) -> None:
        start = time.monotonic()
        playing = np.zeros(0, dtype="<i2")
        while True:
            if (delay := start + self.frames_sent * FRAME_S - time.monotonic()) > 0:
                await asyncio.sleep(delay)
            started: asyncio.Future[tuple[float, float]] | None = None
            if playing.size == 0 and self._queue:
                playing, started = self._queue.pop(0)
            frame = np.zeros(FRAME_SAMPLES, dtype="<i2")
            frame[: min(FRAME_SAMPLES, playing.size)] = playing[:FRAME_SAMPLES]
            playing = playing[FRAME_SAMPLES:]
            sent = await self.client.send_audio(frame.tobytes())
            if started is not None:
                started.set_result((sent, self.frames_sent * FRAME_S * 1000.0))
            self.frames_sent += 1


@dataclass
class Trial:
    """One input and what came of it."""

    kind: str
    after_chunk: int
    sent: float
    sound: str = ""
    """The recording played (audio kinds)."""
    event_id: str | None = None
    frame: VideoFrame | None = None

    @property
    def ms(self) -> float | None:
        return None if self.frame is None else (self.frame.t - self.sent) * 1000.0


async def last_frame_of(client: SessionClient, chunk: int) -> VideoFrame:
    last = clock_of(client).chunk_frames - 1
    return await client.wait_frame(
        lambda f: f.header["chunk"] > chunk or (f.header["chunk"] == chunk and f.header["frame"] == last),
        timeout=30,
    )


async def fire(
    client: SessionClient,
    mic: Microphone,
    kind: str,
    after_chunk: int,
    sound: Sound | None,
    delay: float = 0.0,
) -> Trial:
    """Send one input of ``kind`` (playing ``sound`` for an audio kind) ``delay`` chunks after chunk
    ``after_chunk`` has fully arrived; find its event."""
    await last_frame_of(client, after_chunk)
    await asyncio.sleep(delay * clock_of(client).chunk_s)
    since = len(client.received.messages)
    if sound is not None:
        sent, at_ms = await mic.play(sound.pcm)
        # The frame holding the sound's start goes out this long after its first (the microphones send a
        # frame every FRAME_S): the clock starts then.
        lead_s = sound.begins // FRAME_SAMPLES * FRAME_S
        sent, at_ms = sent + lead_s, at_ms + lead_s * 1000.0
        trial = Trial(kind, after_chunk, sent, sound.name)
        with contextlib.suppress(TimeoutError):
            heard = await client.wait_for(
                lambda m: (
                    m.get("type") == AUDIO_EVENT[kind]
                    and m.get("label", "onset") == "onset"
                    and m["audio_ms"] >= at_ms - 100
                ),  # a detector may place the onset a little early
                timeout=3,
                since=since,
            )
            trial.event_id = heard["event_id"]
        return trial
    ref = f"{kind}{after_chunk}"
    message = (
        {"type": "input.gesture", "gesture": "wave"}
        if kind == "gesture"
        else {"type": "input.text", "text": "hello"}
    )
    trial = Trial(kind, after_chunk, await client.send({**message, "ref": ref}))
    accepted = await client.wait_for(
        lambda m: m.get("type") == "input.accepted" and m.get("ref") == ref, 5, since
    )
    trial.event_id = accepted["event_id"]
    return trial


@contextlib.asynccontextmanager
async def session(url: str, seed: int, splice: bool) -> AsyncIterator[tuple[SessionClient, Microphone]]:
    async with SessionClient(url) as client:
        started = await client.start(seed=seed, splice=splice)
        if started.get("splices", False) != splice:
            raise RuntimeError(
                f"asked for splice={splice}, the session says splices={started.get('splices')}"
            )
        async with Microphone(client) as mic:
            yield client, mic
    await asyncio.sleep(0.5)  # past the local server's resume grace: its session is gone before the next


@dataclass
class Run:
    """One kind's session: its inputs, what the client received, and the server's counters of it at its
    end (``/metrics``; empty for a server given by ``--url``)."""

    trials: list[Trial]
    received: Received
    counters: dict[str, float]


async def run_kind(
    url: str,
    seed: int,
    kind: str,
    gap: int,
    audio: dict[str, list[Sound]],
    waits: list[float],
    splice: bool,
    base: str | None,
) -> Run:
    """A session with an input of ``kind`` per delay in ``waits``, the first after ``first_chunk``."""
    async with session(url, seed, splice) as (client, mic):
        trials = []
        first = first_chunk(clock_of(client))
        for i, wait in enumerate(waits):
            trials.append(await fire(client, mic, kind, first + i * gap, nth(audio, kind, i), wait))
        await last_frame_of(client, trials[-1].after_chunk + gap // 2)
        counters = await asyncio.to_thread(session_counters, base) if base else {}
    for trial in trials:
        trial.frame = client.received.first_reflecting(trial.event_id) if trial.event_id else None
    return Run(trials, client.received, counters)


def splice_table(runs: dict[str, Run]) -> list[str]:
    """Per kind: chunks spliced, and the splices prepared on onsets' hunches (shown, undone)."""
    rows = ["| input | spliced | prepared on a hunch | shown | undone |", "|---|---:|---:|---:|---:|"]
    for kind, run in runs.items():
        c = run.counters
        names = ("spliced_total", "foreseen_total", "foreseen_shown_total", "foreseen_undone_total")
        rows.append(f"| {kind} | " + " | ".join(f"{c[n]:.0f}" if n in c else "-" for n in names) + " |")
    return rows


async def reference(url: str, seed: int, through_chunk: int) -> dict[tuple[int, int], bytes]:
    """Frames of a session with ``seed`` and nothing but silence in the microphone, by (chunk, frame)."""
    async with session(url, seed, splice=False) as (client, _):  # with no input, nothing is spliced
        await last_frame_of(client, through_chunk)
    return {(f.header["chunk"], f.header["frame"]): f.jpeg for f in client.received.video}


def determinism(trial: Trial, received: Received, ref: dict[tuple[int, int], bytes]) -> str:
    """Whether frames before the reacting frame equal the reference and the reacting frame differs.

    Also names the first frame that differs from the reference at all, which shows where a reaction
    really began when the verdict fails.
    """
    if trial.frame is None:
        return "no reacting frame"
    at = (trial.frame.header["chunk"], trial.frame.header["frame"])
    compared = [f for f in received.video if (f.header["chunk"], f.header["frame"]) in ref]
    before = [f for f in compared if (f.header["chunk"], f.header["frame"]) < at]
    same = sum(ref[(f.header["chunk"], f.header["frame"])] == f.jpeg for f in before)
    differs = ref.get(at) not in (None, trial.frame.jpeg)
    first = next((f for f in compared if ref[(f.header["chunk"], f.header["frame"])] != f.jpeg), None)
    where = f"chunk {first.header['chunk']} frame {first.header['frame']}" if first else "none compared"
    verdict = "ok" if same == len(before) and differs else "FAILED"
    return (
        f"{verdict}: {same}/{len(before)} frames before chunk {at[0]} identical; reacting frame "
        f"{'differs' if differs else 'IDENTICAL'}; first differing frame: {where}"
    )


def sound_table(trials: list[Trial]) -> list[str]:
    """Reaction to each recording played: n, p50 and max (ms)."""
    lines = ["| input | recording | n | reflected | p50 (ms) | max (ms) |", "|---|---|---:|---:|---:|---:|"]
    for kind, name in dict.fromkeys((t.kind, t.sound) for t in trials if t.sound):
        ms = [t.ms for t in trials if (t.kind, t.sound) == (kind, name) and t.ms is not None]
        n = sum((t.kind, t.sound) == (kind, name) for t in trials)
        cells = f"{np.median(ms):.0f} | {max(ms):.0f}" if ms else "- | -"
        lines.append(f"| {kind} | {name} | {n} | {len(ms)} | {cells} |")
    return lines


def latency_table(trials: list[Trial]) -> list[str]:
    lines = [
        "| input | n | reflected | p50 (ms) | p95 (ms) | p99 (ms) | max (ms) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for kind in [*KINDS, "all"]:
        group = [t for t in trials if kind in (t.kind, "all")]
        if not group:
            continue
        ms = [t.ms for t in group if t.ms is not None]
        stats = percentiles(ms)
        cells = " | ".join(f"{v:.0f}" for v in (*stats, max(ms))) if stats else "- | - | - | -"
        lines.append(f"| {kind} | {len(group)} | {len(ms)} | {cells} |")
    return lines


async def reaction_run(
    url: str,
    seed: int,
    rounds: int,
    gap: int,
    phase: str,
    splice: bool,
    kinds: tuple[str, ...] = KINDS,
    source: str = "real",
    base: str | None = None,
) -> None:
    audio = sounds(source)
    waits = delays(seed, rounds, phase)
    stolen = Stolen()
    results = {kind: await run_kind(url, seed, kind, gap, audio, waits, splice, base) for kind in kinds}
    steal = stolen.line("these inputs")
    firsts = {kind: (run.trials[0], run.received) for kind, run in results.items()}
    first = min(t.after_chunk for t, _ in firsts.values())
    reacting = [t.frame.header["chunk"] for t, _ in firsts.values() if t.frame is not None]
    through = max(reacting, default=first) + 3
    ref = await reference(url, seed, through)
    # A second no-input session: where two runs without any input already differ, a differing
    # reacting frame proves nothing about the input.
    again = await reference(url, seed, through)
    unstable = min((at for at, jpeg in ref.items() if again.get(at, jpeg) != jpeg), default=None)
    trials = [t for run in results.values() for t in run.trials]
    when = (
        "all at the worst moment" if phase == "worst" else "the first at the worst moment, the rest at random"
    )
    spliced = (
        "spliced into the chunk playing" if splice else "not spliced: each shows from a chunk's first frame"
    )
    print(
        f"## Reaction latency at the client (seed {seed}, {rounds} per kind, every {gap} chunks, {when}; "
        f"reactions {spliced})\n"
    )
    print("\n".join(latency_table(trials)))
    print(f"\n{steal}")
    if source == "real":
        print("\n".join(["", "By recording:", "", *sound_table(trials)]))
    if base is not None:
        print(
            "\n".join(
                ["", "The server's splices (its counters at each session's end):", "", *splice_table(results)]
            )
        )
    print(f"\n## Determinism: the first input of each kind, sent after chunk {first}, vs. no input\n")
    if unstable is None:
        print(f"Two sessions without input agree on every frame through chunk {through}.\n")
    else:
        print(f"Two sessions without input FIRST DIFFER at chunk {unstable[0]} frame {unstable[1]}.\n")
    print("| input | event | reacting chunk | reaction (ms) | verdict |\n|---|---|---:|---:|---|")
    for kind, (trial, received) in firsts.items():
        chunk = trial.frame.header["chunk"] if trial.frame else "-"
        ms = f"{trial.ms:.0f}" if trial.ms is not None else "-"
        verdict = determinism(trial, received, ref)
        if trial.frame is not None and unstable is not None and (chunk, 0) >= unstable:
            verdict = f"inconclusive (no-input runs differ there too): {verdict}"
        print(f"| {kind} | {trial.event_id or '-'} | {chunk} | {ms} | {verdict} |")


def window_edges(times: np.ndarray, fps: float) -> np.ndarray:
    """Starts of the whole 1 s windows of arrival ``times`` (sorted seconds): half a frame before a frame
    is due, so a few ms of jitter does not move frames between neighbouring windows (which would read as
    23 fps next to 25)."""
    return np.arange(times[0] - 0.5 / fps, times[-1] - 1.0, 1.0)


def window_counts(times: np.ndarray, fps: float) -> np.ndarray:
    """Frames in each window of ``window_edges``."""
    edges = window_edges(times, fps)
    return np.searchsorted(times, edges + 1.0) - np.searchsorted(times, edges)


def timing(received: Received, clock: MediaClock) -> list[str]:
    """On-time chunks (server count and client arrival), 1-second frame-rate windows, lateness."""
    fps = clock.fps
    video = received.video
    chunk_arrival: dict[int, float] = {}
    for f in video:
        chunk_arrival.setdefault(f.header["chunk"], f.t)
    chunks = np.array(sorted(chunk_arrival))
    arrival = np.array([chunk_arrival[c] for c in chunks])
    # The media clock as seen here: the earliest (least delayed) chunk sets where chunk 0 is due.
    due = chunks * clock.chunk_s
    late_ms = (arrival - due - np.min(arrival - due)) * 1000.0
    per_window = window_counts(np.array([f.t for f in video]), fps)
    metrics = received.of_type("metrics")
    server_on_time = f"{metrics[-1]['on_time'] * 100:.2f} %" if metrics else "not reported"
    return [
        "| measure | value |",
        "|---|---:|",
        f"| chunks received | {chunks.size} |",
        f"| chunks on time (server's count) | {server_on_time} |",
        f"| chunks arriving within one chunk of the media clock | {np.mean(late_ms <= 1000 * clock.chunk_s) * 100:.2f} % |",
        f"| chunk lateness p50 / p99 / max (ms) | {np.percentile(late_ms, 50):.0f} / {np.percentile(late_ms, 99):.0f} / {late_ms.max():.0f} |",
        f"| 1-second windows | {per_window.size} |",
        f"| windows with >= {fps - 0.5:g} fps | {np.mean(per_window >= fps - 0.5) * 100:.2f} % (min {per_window.min() if per_window.size else 0} fps) |",
    ]


def voice_mouth_offset(received: Received, identity: int, fps: int, max_lag: int = MAX_LAG_FRAMES) -> str:
    """The lag (ms) that best lines the voice's loudness up with the mouth's openness; + = mouth late.

    Loudness is the RMS of each frame's audio slice; openness is what ``streaming_model.probes`` reads
    from the frame's pixels. Lags up to ``max_lag`` frames either way are tried (``server.core.lipsync``,
    which the server's own figure uses on the mouth envelope it generated each frame with).
    """
    from streaming_model.probes import measure

    voice = received.voice_loudness()
    mouth = np.nan_to_num(measure(received.pictures(), identity).mouth)
    best, r = best_lag(voice, mouth, max_lag)
    if math.isnan(r):
        return "not measured: the character did not speak, or its mouth never moved"
    if r < MIN_CORRELATION:
        return (
            f"not measured: the mouth does not follow the voice (best correlation r = {r:.2f}, "
            f"at {best * 1000 / fps:+.0f} ms)"
        )
    return f"{best * 1000 / fps:+.0f} ms (correlation r = {r:.2f} at that lag)"


async def long_run(
    url: str, seed: int, minutes: float, gap: int, phase: str, splice: bool, source: str = "real"
) -> None:
    audio = sounds(source)
    trials: list[Trial] = []
    end = time.monotonic() + minutes * 60
    async with session(url, seed, splice) as (client, mic):
        clock = clock_of(client)
        waits = delays(seed, int(minutes * 60 / (gap * clock.chunk_s)) + 2, phase)
        chunk = first_chunk(clock)
        while time.monotonic() < end:
            wait = waits[len(trials) % len(waits)]
            kind = KINDS[len(trials) % len(KINDS)]
            sound = nth(audio, kind, len(trials) // len(KINDS))
            trials.append(await fire(client, mic, kind, chunk, sound, wait))
            chunk += gap
        await last_frame_of(client, chunk)
    for trial in trials:
        trial.frame = client.received.first_reflecting(trial.event_id) if trial.event_id else None
    print(f"## A {minutes:g}-minute session (seed {seed}, an input every {gap} chunks)\n")
    print("\n".join(latency_table(trials)))
    print("\n## Timing\n")
    print("\n".join(timing(client.received, clock)))
    print(f"\nVoice-to-mouth offset: {voice_mouth_offset(client.received, identity=0, fps=clock.fps)}")


# Two sessions at once (a measured one and its reference); a short resume grace, so that a finished session
# stops generating before the next one is measured. Inputs foreseen or not (``--foresee``).
SERVER_CONFIG = """
[server]
foresee = {foresee}

[server.limits]
admission = "ceiling"  # admission is not what is measured here
max_sessions = 2
resume_grace_s = 0.2
"""


async def main(args: argparse.Namespace) -> None:
    arms = {"on": [True], "off": [False], "both": [True, False]}
    for foresee in [None] if args.url else arms[args.foresee]:
        async with contextlib.AsyncExitStack() as stack:
            base = None
            if foresee is not None:
                print(
                    f"# Inputs {'foreseen' if foresee else 'not foreseen'} (`[server] foresee = {foresee}`)\n"
                )
                config = SERVER_CONFIG.format(foresee=str(foresee).lower())
                base = await stack.enter_async_context(served(config))
            url = args.url or session_url(base or "")
            for splice in arms[args.splice]:
                if args.minutes:
                    await long_run(url, args.seed, args.minutes, args.gap, args.phase, splice, args.sounds)
                else:
                    kinds = tuple(args.kinds)
                    await reaction_run(
                        url, args.seed, args.rounds, args.gap, args.phase, splice, kinds, args.sounds, base
                    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", help="a running server's session endpoint (default: start one here)")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--rounds", type=int, default=12, help="inputs per kind")
    parser.add_argument(
        "--kinds", nargs="+", choices=KINDS, default=list(KINDS), help="which kinds of input (default: all)"
    )
    parser.add_argument(
        "--gap",
        type=int,
        default=15,
        help="chunks between inputs (15 = 2.5 s on the tiny model's clock: past the reflexes' 2 s cooldowns)",
    )
    parser.add_argument(
        "--sounds",
        choices=("real", "synthetic"),
        default="real",
        help="what the microphone plays: the real recordings of tests/data/sounds in turn, or one knock "
        "train, clap and Piper line made here (the sounds of the figures before 2026-12-07)",
    )
    parser.add_argument("--minutes", type=float, help="one long session instead (timing and A/V offset)")
    parser.add_argument(
        "--phase",
        choices=("random", "worst"),
        default="random",
        help="when inputs go in within a chunk: spread over it (after a first worst-moment input), or "
        "every one right after a chunk's last frame",
    )
    parser.add_argument(
        "--splice",
        choices=("on", "off", "both"),
        default="on",
        help="whether the sessions ask for reactions spliced into the chunk playing (session.start splice, "
        "as the browser page does); both: a run of each, spliced first",
    )
    parser.add_argument(
        "--foresee",
        choices=("on", "off", "both"),
        default="on",
        help="whether the server prepares the splice of an onset or a start of speech on its hunch ([server] foresee); both: "
        "a server of each in turn, foreseeing first (not with --url: that server decides)",
    )
    asyncio.run(main(parser.parse_args()))
