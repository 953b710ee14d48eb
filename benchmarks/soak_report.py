"""The soak's report (``soak.py``): what a run read, and the markdown table of its figures.

The table's figures come from the client (its frames' arrival and send times, the inputs answered), the
server (its ``/metrics``, its log's late chunks, its memory) and the machine (its CPU times), each judged
as the reaction benchmark judges 1 s windows.
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
from reaction import window_counts, window_edges

from server.client import SessionClient
from tests.support.observe import Families

WINDOW_SLACK_FRAMES = 0.5
"""A 1 s window counts as full at the session's fps less this (23.5 fps at 24)."""
NEAR_S = 1.5
"""Late chunks this close to a bystander's start or end are counted apart (a neighbour's warm-up or teardown)."""


def windows(times: list[float], fps: float, full: float, rewinds: list[float]) -> tuple[float, int, int]:
    """The 1 s windows of a ``fps`` stream as the reaction benchmark counts them (from half a frame before
    a frame is due: windows starting on a frame read one that came a millisecond early as 25 fps beside
    23): the share holding at least ``full`` frames, how many hold fewer, and how many of those overlap
    the 2 s after one of the ``rewinds`` (where the picture jumps back to a checkpoint)."""
    t = np.asarray(times)
    starts, counts = window_edges(t, fps), window_counts(t, fps)
    short = starts[counts < full]
    near = sum(any(r - 1.0 < s < r + 2.0 for r in rewinds) for s in short)
    return (float(np.mean(counts >= full)) if counts.size else 0.0), short.size, near


STALL_S = 0.05
"""A pause of this process's event loop longer than this is a stall of the measuring client."""
GAP_S = 0.1
"""A gap between frames longer than this is a stall of the picture (as the client saw it)."""


def gaps_in_stalls(
    times: list[float], sent: list[float], stalls: list[tuple[float, float]]
) -> tuple[int, int, int]:
    """Frame gaps longer than ``GAP_S`` at the client, how many of them overlap a stall of the client's own
    loop, and how many the server also sent with a gap that long (``sent``: its send times, in seconds)."""
    gaps = [n for n, (a, b) in enumerate(itertools.pairwise(times)) if b - a > GAP_S]
    in_stalls = sum(any(s < times[n + 1] and e > times[n] for s, e in stalls) for n in gaps)
    return len(gaps), in_stalls, sum(sent[n + 1] - sent[n] > GAP_S for n in gaps)


def near_marks(
    late: list[float], marks: list[float], within_s: float, span_s: float
) -> tuple[int, int, float]:
    """Of the times ``late`` (late chunks), how many fell within ``within_s`` of a mark (a bystander
    starting or ending) and how many elsewhere, and the share of a run of ``span_s`` that near a mark."""
    edges = np.asarray(marks)
    near = sum(bool(edges.size) and float(np.min(np.abs(edges - t))) <= within_s for t in late)
    gaps = np.diff(edges) if edges.size > 1 else np.zeros(0)
    covered = 2 * within_s + float(np.minimum(gaps, 2 * within_s).sum()) if marks else 0.0
    return near, len(late) - near, min(1.0, covered / span_s) if span_s else 0.0


CORES = re.compile(r"([a-z][a-z0-9 \-]*?) (\d+\.\d+)(?: \((\d+\.\d+) waiting\))?")
"""A ``kind cores`` pair of a late chunk's CPU note (``server.cpu_watch.CpuWatch.note``), with the cores'
worth that kind waited runnable, if it says."""


class LateLog:
    """When the server logged each of a session's late chunks (its warning, timed on this clock), and the
    cores each kind of thread (run, waited) and the machine used in the second before (the CPU note)."""

    def __init__(self) -> None:
        self.session = ""
        self.times: list[float] = []
        self.cpu: list[dict[str, tuple[float, float]]] = []

    def take(self, line: str) -> None:
        if self.session and f"session {self.session}: chunk" in line and " late;" in line:
            self.times.append(time.monotonic())
            note = line.partition("in cores: ")[2].replace(" of ", " ")
            self.cpu.append({kind: (float(run), float(wait or 0)) for kind, run, wait in CORES.findall(note)})

    def cpu_before(self, span: tuple[float, float]) -> str:
        """The mean cores of each kind in the seconds before the late chunks within ``span``, busiest first."""
        notes = [cpu for t, cpu in zip(self.times, self.cpu, strict=True) if span[0] <= t <= span[1] and cpu]
        mean = {
            kind: tuple(sum(cpu.get(kind, (0.0, 0.0))[i] for cpu in notes) / len(notes) for i in (0, 1))
            for kind in {k for cpu in notes for k in cpu}
        }
        return ", ".join(
            f"{kind} {run:.2f}" + (f" ({wait:.2f} waiting)" if wait >= 0.005 else "")
            for kind, (run, wait) in sorted(mean.items(), key=lambda kv: -kv[1][0])
        )


def thread_cores(before: Families, after: Families, span_s: float) -> str:
    """Cores each kind of the server's threads ran, and waited runnable, between two readings of its
    ``/metrics`` ``span_s`` apart, busiest first."""

    def per_kind(families: Families, name: str) -> dict[str, float]:
        samples = families.get(name, {})
        return {dict(labels)["kind"]: value for (_, labels), value in samples.items()}

    runs = [per_kind(f, "onstage_thread_cpu_seconds") for f in (before, after)]
    waits = [per_kind(f, "onstage_thread_runnable_wait_seconds") for f in (before, after)]
    cores = {
        kind: (
            (runs[1][kind] - runs[0].get(kind, 0.0)) / span_s,
            (waits[1][kind] - waits[0].get(kind, 0.0)) / span_s,
        )
        for kind in runs[1]
    }
    return ", ".join(
        f"{kind} {run:.2f} ({wait:.2f} waiting)"
        for kind, (run, wait) in sorted(cores.items(), key=lambda kv: -kv[1][0])
        if run >= 0.005
    )


def on_client_clock(times: list[float], sent: list[float]) -> list[float]:
    """The server's send times moved onto the client's clock by their median offset (so that the rewinds,
    stamped here, fall where they did among them)."""
    offset = float(np.median(np.asarray(times) - np.asarray(sent)))
    return [t + offset for t in sent]


def slope(readings: list[tuple[float, float]]) -> float:
    """MiB a minute: the least-squares line through the readings (0 with fewer than two)."""
    if len(readings) < 2:
        return 0.0
    minutes, mib = np.asarray(readings).T
    return float(np.polyfit(minutes, mib, 1)[0])


def answered(client: SessionClient, ids: list[str]) -> Counter[str]:
    """How the inputs (sent ones and those the server heard in the audio) came out."""
    heard = [
        m["event_id"]
        for kind in ("input.speech_started", "input.sound")
        for m in client.received.of_type(kind)
    ]
    told = {m["event_id"] for m in client.received.of_type("input.outcome")}
    out: Counter[str] = Counter()
    for event_id in [*ids, *heard]:
        if client.received.first_reflecting(event_id) is not None:
            out["reflected"] += 1
        elif event_id in told:
            out["told why not"] += 1
        else:
            out["unanswered"] += 1
            said = [(t, m) for t, m in client.received.messages if m.get("event_id") == event_id]
            print(f"unanswered: {event_id}: {said}", file=sys.stderr)
    return out


@dataclass
class Measured:
    """What the main session's driving read: the event ids of its inputs after the warm-up, when it sent
    each rewind, the span after the warm-up (monotonic times) with the machine's CPU times at its ends,
    the server's ``/metrics`` at its ends, and the server's resident memory after the warm-up and every
    30 s through the span."""

    ids: list[str]
    rewinds: list[float]
    span: tuple[float, float]
    cpu_start: tuple[float, float]
    cpu_end: tuple[float, float]
    warm_metrics: Families
    threads_after: Families
    rss_start: float
    rss_trend: list[tuple[float, float]]


@dataclass
class Session:
    """The main session's run: its ``session.started``, what its driving read (``Measured``), the
    bystanders' counts and start and end times, the server's resident memory at the end, the last
    ``metrics`` message, its event loop's lag over the span, its count of chunks decided without their
    voice's audio, and the stalls of this process's own loop."""

    started: dict[str, Any]
    measured: Measured
    stats: Counter[str]
    marks: list[float]
    rss_end: float
    metrics: dict[str, Any]
    lag: dict[str, float]
    overdue_voice: float | None
    stalls: list[tuple[float, float]]


@dataclass
class Soak:
    """A whole run: the main session's, its client (all it received), the server's late chunks, how many
    times the Director's LLM was called, and the story store after the server stopped (its integrity
    check and how many of the checkpoints the client was told about it lacks)."""

    session: Session
    client: SessionClient
    late_log: LateLog
    director_calls: int
    checkpoints: set[str]
    integrity: str
    missing: int


def report(run: Soak, args: argparse.Namespace) -> None:
    """Print the run's figures as a markdown table."""
    rows = [*picture_rows(run, args), *load_rows(run, args), *aftermath_rows(run)]
    print("| measure | value |\n|---|---|")
    print("\n".join(f"| {name} | {value} |" for name, value in rows))


def picture_rows(run: Soak, args: argparse.Namespace) -> list[tuple[str, str]]:
    """The report's rows on the picture: chunks on time, full 1 s windows, frame gaps, stalls."""
    session, received = run.session, run.client.received
    times = [f.t for f in received.video]
    sent = on_client_clock(times, [f.header["sent_ms"] / 1000.0 for f in received.video])
    gaps, sent_gaps = np.diff(times) * 1000.0, np.diff(sent) * 1000.0
    fps, rewinds, lag, stalls = session.started["fps"], session.measured.rewinds, session.lag, session.stalls
    full = fps - WINDOW_SLACK_FRAMES
    full_share, short, near = windows(times, fps, full, rewinds)
    sent_share, sent_short, sent_near = windows(sent, fps, full, rewinds)
    return [
        ("minutes", f"{args.minutes:g}"),
        ("video frames received", f"{len(times)}"),
        ("chunks on time (server)", f"{100 * session.metrics['on_time']:.2f} %"),
        (
            "chunks decided without their voice's audio, past their deadline (`on_time`)",
            f"{session.overdue_voice}",
        ),
        (
            "the server's event loop: timers run over 20 / 50 / 100 ms late, of timers due every 50 ms",
            " / ".join(f"{lag['count'] - lag[le]:.0f}" for le in ("0.02", "0.05", "0.1"))
            + f" of {lag['count']:.0f}",
        ),
        (f"1 s windows with >= {full:g} fps", f"{100 * full_share:.2f} %"),
        (f"1 s windows short of {full:g} fps / of them within 2 s after a story rewind", f"{short} / {near}"),
        ("the same, by the server's send times (`sent_ms`)", f"{100 * sent_share:.2f} %"),
        ("the same, short / within 2 s after a rewind", f"{sent_short} / {sent_near}"),
        (
            "largest frame gap: at the client / as the server sent them",
            f"{gaps.max():.0f} / {sent_gaps.max():.0f} ms",
        ),
        (
            "frame gap p99: at the client / as sent",
            f"{np.percentile(gaps, 99):.1f} / {np.percentile(sent_gaps, 99):.1f} ms",
        ),
        (
            f"frame gaps over {1000 * GAP_S:.0f} ms at the client / of them while this client's own loop "
            "stalled / of them sent that far apart by the server",
            " / ".join(str(n) for n in gaps_in_stalls(times, sent, stalls)),
        ),
        (
            f"this client's loop stalls over {1000 * STALL_S:.0f} ms: count / longest",
            f"{len(stalls)} / {max((1000 * (e - s) for s, e in stalls), default=0.0):.0f} ms",
        ),
    ]


def load_rows(run: Soak, args: argparse.Namespace) -> list[tuple[str, str]]:
    """The report's rows on the load: inputs answered, the Director, rewinds, bystanders, late chunks, cores."""
    session, measured = run.session, run.session.measured
    span, stats = measured.span, session.stats
    outcome = answered(run.client, measured.ids)
    late_near, late_away, near_share = near_marks(
        [t for t in run.late_log.times if span[0] <= t <= span[1]],
        [t for t in session.marks if span[0] - NEAR_S <= t <= span[1] + NEAR_S],
        NEAR_S,
        span[1] - span[0],
    )
    return [
        (
            "inputs: reflected / told why not / unanswered",
            f"{outcome['reflected']} / {outcome['told why not']} / {outcome['unanswered']}",
        ),
        ("Director calls", f"{run.director_calls}"),
        ("story rewinds sent", f"{int(60 * args.minutes // args.rewind_s)}"),
        (
            "bystander sessions opened and closed / refused",
            f"{stats['bystander sessions']} / {stats['bystander refused']}",
        ),
        (
            f"late chunks after the warm-up (the server's log): within {NEAR_S:g} s of a bystander's start or "
            "end / elsewhere (share of that time this near)",
            f"{late_near} / {late_away} ({100 * near_share:.0f} %)",
        ),
        (
            f"the machine's cores busy / stolen by the hypervisor, mean over the run (of {os.cpu_count()})",
            " / ".join(
                f"{(b - a) / (span[1] - span[0]):.2f}"
                for a, b in zip(measured.cpu_start, measured.cpu_end, strict=True)
            ),
        ),
        (
            "the server's threads over the run, in cores: run (waited runnable), by kind (`/metrics`)",
            thread_cores(measured.warm_metrics, measured.threads_after, span[1] - span[0]),
        ),
        (
            "cores used in the second before a late chunk after the warm-up, mean (the warning's CPU note)",
            run.late_log.cpu_before(span) or "-",
        ),
    ]


def aftermath_rows(run: Soak) -> list[tuple[str, str]]:
    """The report's rows on what the run left: the server's memory and the story store."""
    rss_start, rss_end, trend = (
        run.session.measured.rss_start,
        run.session.rss_end,
        run.session.measured.rss_trend,
    )
    return [
        (
            "server RSS after warm-up -> end",
            f"{rss_start:.0f} -> {rss_end:.0f} MiB ({100 * (rss_end / rss_start - 1):+.1f} %)",
        ),
        (
            "server RSS trend (least squares over 30 s readings)",
            f"{slope(trend):+.2f} MiB a minute",
        ),
        ("story store integrity", run.integrity),
        ("announced checkpoints missing from the store", f"{run.missing} of {len(run.checkpoints)}"),
    ]
