"""The server's Prometheus metrics, with prometheus-client: histograms across sessions (reaction time to
the first reflecting frame by input kind, chunk time, audio-to-mouth offset, voice-to-voice latency), the
on-time count, gauges for sessions and capacity, the server's counters, and the per-session series
docs/protocol.md names.

One registry per server (several servers in one process, as in tests, do not share series).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from server.app import LiveSession, OnstageServer

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

REACTION_BUCKETS = (0.05, 0.08, 0.1, 0.12, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75, 1.0, 2.0)
"""Seconds: around the reaction goals (110 ms p50, 190 ms p99 for gestures; 300 ms for speech)."""
CHUNK_BUCKETS = (0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.12, 0.14, 0.17, 0.2, 0.25, 0.35, 0.5, 1.0)
"""Seconds: around a chunk's length (167 ms for the tiny model, 750 ms for the world at 16 fps)."""
OFFSET_BUCKETS = (-0.3, -0.2, -0.1, -0.06, -0.02, 0.02, 0.06, 0.1, 0.2, 0.3)
"""Seconds, + = mouth late: (-0.02, 0.02] is in step; a frame is 42 ms at 24 fps, 63 ms at 16."""
VOICE_TO_VOICE_BUCKETS = (0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 20.0)
"""Seconds: around a spoken turn's answer (under a second is a good voice agent, several an LLM's reply)."""
LOOP_LAG_BUCKETS = (0.002, 0.005, 0.01, 0.02, 0.05, 0.08, 0.1, 0.2, 0.5, 1.0)
"""Seconds: a few ms is a healthy loop; past a chunk's decision margin (tens of ms) chunks go out late."""


class ServerMetrics:
    """The metrics of one ``OnstageServer``; an ``Observer`` (``server.core.outputs``) of its sessions."""

    def __init__(self, server: OnstageServer) -> None:
        self.server = server
        self.registry = CollectorRegistry()
        self.reactions = Histogram(
            "onstage_reaction_seconds",
            "Time from an input's arrival to the first video frame sent that reflects it, by input kind.",
            ["kind"],
            buckets=REACTION_BUCKETS,
            registry=self.registry,
        )
        self.chunks = Histogram(
            "onstage_chunk_seconds",
            "Time from a chunk's decision to its frames being ready (commit of the chunk before, generate, "
            "decode, encode).",
            buckets=CHUNK_BUCKETS,
            registry=self.registry,
        )
        self.chunks_on_time = Counter(
            "onstage_chunks_on_time",
            "Chunks ready by their send time (against onstage_chunk_seconds_count: the on-time share).",
            registry=self.registry,
        )
        self.offsets = Histogram(
            "onstage_audio_mouth_offset_seconds",
            "Over two-second stretches of the character's speech sent, the lag that lines the mouth each "
            "frame was generated with up with the loudness of the audio sent with it (+ = mouth late).",
            buckets=OFFSET_BUCKETS,
            registry=self.registry,
        )
        self.voice_to_voice_latency = Histogram(
            "onstage_voice_to_voice_seconds",
            "Time from the end of the user's speech to the first audible sample of the character's answer "
            "sent.",
            buckets=VOICE_TO_VOICE_BUCKETS,
            registry=self.registry,
        )
        self.loop_lags = Histogram(
            "onstage_event_loop_lag_seconds",
            "How late the server's event loop ran a timer due every 50 ms (whatever holds the loop delays "
            "every session's decisions and sends).",
            buckets=LOOP_LAG_BUCKETS,
            registry=self.registry,
        )
        self.registry.register(_ServerCollector(server))

    def reaction(self, kind: str, seconds: float) -> None:
        self.reactions.labels(kind=kind).observe(seconds)

    def chunk(self, seconds: float, on_time: bool) -> None:
        self.chunks.observe(seconds)
        if on_time:
            self.chunks_on_time.inc()

    def cpu_note(self) -> str:
        return self.server.cpu.note()

    def voice_to_voice(self, seconds: float) -> None:
        self.voice_to_voice_latency.observe(seconds)

    def lip_sync(self, offset_s: float) -> None:
        self.offsets.observe(offset_s)

    def loop_lag(self, seconds: float) -> None:
        self.loop_lags.observe(seconds)

    def exposition(self) -> bytes:
        """The metrics in Prometheus' text format."""
        return generate_latest(self.registry)


_SessionSeries = tuple[str, str, str, Callable[..., float]]
"""A per-session series: its kind ("gauge" or "counter"), name, documentation and value of a session."""

# What a session's conductor knows; the server's collector adds what the server itself counts per session.
_CONDUCTOR_SERIES: tuple[_SessionSeries, ...] = (
    (
        "gauge",
        "onstage_session_fps",
        "Frames sent over the last second.",
        lambda s: s.conductor.metrics().fps,
    ),
    (
        "gauge",
        "onstage_session_on_time",
        "Share of chunks ready for their send.",
        lambda s: s.conductor.metrics().on_time,
    ),
    (
        "counter",
        "onstage_session_redirects",
        "Chunks regenerated in flight.",
        lambda s: s.conductor.redirects,
    ),
    (
        "counter",
        "onstage_session_replaced",
        "Generated chunks regenerated before they were sent.",
        lambda s: s.conductor.replaced,
    ),
    (
        "counter",
        "onstage_session_spliced",
        "Chunks made again while they played: a reaction spliced into their frames not yet sent.",
        lambda s: s.conductor.spliced,
    ),
    (
        "counter",
        "onstage_session_foreseen",
        "Splices prepared on a hunch (an onset, a start of speech) while it was confirmed "
        "(server.core.foresight).",
        lambda s: s.conductor.foreseen.started,
    ),
    (
        "counter",
        "onstage_session_foreseen_shown",
        "Splices prepared on a hunch whose input was confirmed, and shown.",
        lambda s: s.conductor.foreseen.used,
    ),
    (
        "counter",
        "onstage_session_foreseen_undone",
        "Splices prepared on a hunch and undone: the hunch was dropped, or the chunk went on without it.",
        lambda s: s.conductor.foreseen.dropped,
    ),
    ("counter", "onstage_session_chunks_sent", "Chunks sent.", lambda s: s.conductor.chunks_sent),
    (
        "counter",
        "onstage_session_chunks_on_time",
        "Chunks ready for their send.",
        lambda s: s.conductor.chunks_on_time,
    ),
    (
        "counter",
        "onstage_session_voice_overdue",
        "Chunks decided without their voice's audio, not ready by their deadline (voice_start on_time).",
        lambda s: s.conductor.player.overdue,
    ),
)


class _ServerCollector(Collector):
    """What the server holds at the moment of a scrape: sessions, capacity, counters, per-session series."""

    def __init__(self, server: OnstageServer) -> None:
        self.server = server

    def collect(self) -> Iterable[Metric]:
        server, stats = self.server, self.server.stats
        yield _gauge(
            "onstage_sessions", "Sessions held: live and waiting for their client.", len(server.sessions)
        )
        yield _gauge(
            "onstage_sessions_waiting", "Sessions waiting for their client to resume.", len(server.waiting())
        )
        yield _gauge("onstage_sessions_live", "Sessions with a client connected.", server.live_count())
        yield _gauge(
            "onstage_capacity_sessions",
            "Live sessions this server would hold now: what its generators and machine measurably keep real-time.",
            server.admission.capacity(),
        )
        if (load := server.admission.load(1)) is not None:
            yield _gauge(
                "onstage_generator_busy",
                "Share of the last seconds the generator threads spent on chunks (mean over threads).",
                load.busy,
            )
            yield _gauge(
                "onstage_generator_busy_next",
                "The busiest generator thread's share with one more session (admission's figure).",
                load.after,
            )
        if (machine := server.admission.machine(server.live_count())) is not None:
            yield _gauge(
                "onstage_machine_busy",
                "Share of the machine's cores busy over the last seconds, every process counted.",
                machine.load.busy / machine.load.cores,
            )
            yield _gauge(
                "onstage_machine_busy_next",
                "The machine's share with one more session (admission's figure, when it is measured).",
                machine.after,
            )
            yield _gauge(
                "onstage_session_cores",
                "Cores one session costs this server, as admission prices it (what one measurably cost lately).",
                machine.session_cores,
            )
        yield _counter(
            "onstage_sessions_evicted", "Waiting sessions ended to make room.", stats.evicted_total
        )
        yield _counter("onstage_sessions_started", "Sessions started.", stats.sessions_total)
        yield _counter("onstage_sessions_refused", "Sessions refused at capacity.", stats.refused_total)
        yield _counter(
            "onstage_sessions_lost_no_slot",
            "Sessions ended because their generator's worker died and no other generator slot was free.",
            stats.lost_no_slot_total,
        )
        yield _counter("onstage_client_errors", "Client messages answered with an error.", stats.errors_total)
        yield _counter(
            "onstage_frames_dropped",
            "Media frames dropped for clients that could not take them.",
            server.dropped_total(),
        )
        yield from self._threads()
        yield from self._per_session()

    def _threads(self) -> Iterator[Metric]:
        totals = sorted(self.server.cpu.by_kind().items())
        run = CounterMetricFamily(
            "onstage_thread_cpu_seconds",
            "CPU seconds run by the server's threads, by kind (lane and gen: the generators; loop: the event "
            "loop; native: libraries' own threads).",
            labels=["kind"],
        )
        wait = CounterMetricFamily(
            "onstage_thread_runnable_wait_seconds",
            "Seconds the server's threads waited for a core while runnable, by kind: how much they were "
            "held back by the machine's other work.",
            labels=["kind"],
        )
        for kind, (run_s, wait_s) in totals:
            run.add_metric([kind], run_s)
            wait.add_metric([kind], wait_s)
        yield run
        yield wait

    def _per_session(self) -> Iterator[Metric]:
        """The per-session series, labelled by session: the recent chunk times' quantiles, then one family
        per series of ``_CONDUCTOR_SERIES`` and the media dropped."""
        sessions = list(self.server.sessions.items())
        series: list[_SessionSeries] = [
            *_CONDUCTOR_SERIES,
            (
                "counter",
                "onstage_session_media_dropped",
                "Media frames dropped for this session's client.",
                self.server.dropped_of,
            ),
        ]
        yield self._chunk_quantiles(sessions)
        for kind, name, documentation, value in series:
            yield self._session_family(kind, name, documentation, value, sessions)

    @staticmethod
    def _chunk_quantiles(sessions: list[tuple[str, LiveSession]]) -> GaugeMetricFamily:
        """Each session's recent chunk times at the median and p99 (none for a session without any yet)."""
        quantiles = GaugeMetricFamily(
            "onstage_session_chunk_seconds",
            "A session's recent chunk times (generate, decode, encode: what a regeneration takes) at the "
            "median and p99.",
            labels=["session", "quantile"],
        )
        for sid, session in sessions:
            if times := session.conductor.chunk_times:
                for q in (0.5, 0.99):
                    quantiles.add_metric([sid, str(q)], float(np.quantile(times, q)))
        return quantiles

    @staticmethod
    def _session_family(
        kind: str,
        name: str,
        documentation: str,
        value: Callable[..., float],
        sessions: list[tuple[str, LiveSession]],
    ) -> Metric:
        """A gauge or (``kind``) counter family of ``value`` of each session."""
        family = (GaugeMetricFamily if kind == "gauge" else CounterMetricFamily)(
            name, documentation, labels=["session"]
        )
        for sid, session in sessions:
            family.add_metric([sid], float(value(session)))
        return family


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


def _counter(name: str, documentation: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, documentation, value=value)
