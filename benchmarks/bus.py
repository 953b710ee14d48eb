"""Event bus benchmark: throughput with 10 subscribers, and publish-to-handle latency at a paced rate.

    .venv/bin/python benchmarks/bus.py [--subscribers 10] [--rate 10000] [--seconds 5]

Throughput: events published as fast as the bus takes them, every subscriber consuming every event (the
``BLOCK`` policy, so nothing is dropped and the figure is honest). Latency: events published at ``--rate``
per second on a paced schedule; each subscriber notes ``monotonic_ns() - event.t_ns`` when it handles an
event. Runs on uvloop, as the server does. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import time

import numpy as np
import uvloop

from events.bus import EventBus, Overflow, Subscription
from events.stamp import Stamper
from events.vocabulary import AudioLevel, Gesture


async def _consume(sub: Subscription, n: int, latencies: list[int] | None) -> None:
    for _ in range(n):
        event = await sub.get()
        if latencies is not None:
            latencies.append(time.monotonic_ns() - event.t_ns)


async def throughput(subscribers: int, n: int) -> float:
    """Events per second through the bus, each delivered to every subscriber."""
    bus = EventBus()
    stamp = Stamper("bench")
    subs = [bus.subscribe(maxsize=1024, overflow=Overflow.BLOCK) for _ in range(subscribers)]
    consumers = [asyncio.create_task(_consume(s, n, None)) for s in subs]
    start = time.perf_counter()
    for i in range(n):
        await bus.publish(stamp(AudioLevel, audio_ms=float(i), rms_db=-30.0, peak=0.1))
    await asyncio.gather(*consumers)
    return n / (time.perf_counter() - start)


async def paced_latency(subscribers: int, rate: float, seconds: float) -> tuple[np.ndarray, int]:
    """Publish-to-handle latencies (ns) at ``rate`` events/s, and how many events were dropped."""
    bus = EventBus()
    stamp = Stamper("bench")
    n = int(rate * seconds)
    subs = [bus.subscribe(maxsize=4096) for _ in range(subscribers)]
    latencies: list[int] = []
    consumers = [asyncio.create_task(_consume(s, n, latencies)) for s in subs]
    period_ns = int(1e9 / rate)
    start = time.monotonic_ns()
    for i in range(n):
        due = start + i * period_ns
        while time.monotonic_ns() < due:  # noqa: ASYNC110 (busy pacing: sleep() is too coarse for 100 us)
            await asyncio.sleep(0)
        # Alternate a bulk and a control event so both lanes are exercised.
        if i % 2:
            bus.publish_nowait(stamp(Gesture, gesture="wave"))
        else:
            bus.publish_nowait(stamp(AudioLevel, audio_ms=float(i), rms_db=-30.0, peak=0.1))
        await asyncio.sleep(0)
    await asyncio.wait_for(asyncio.gather(*consumers), timeout=seconds + 10)
    return np.asarray(latencies), sum(s.dropped for s in subs)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subscribers", type=int, default=10)
    parser.add_argument("--rate", type=float, default=10_000.0)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()

    eps = await throughput(args.subscribers, 50_000)
    lat, dropped = await paced_latency(args.subscribers, args.rate, args.seconds)
    ms = lat / 1e6
    print(f"| measure ({args.subscribers} subscribers) | value |")
    print("|---|---|")
    print(f"| throughput, every event to every subscriber | {eps:,.0f} events/s |")
    print(f"| publish-to-handle p50 at {args.rate:,.0f} events/s | {np.percentile(ms, 50):.3f} ms |")
    print(f"| publish-to-handle p99 at {args.rate:,.0f} events/s | {np.percentile(ms, 99):.3f} ms |")
    print(f"| publish-to-handle max at {args.rate:,.0f} events/s | {ms.max():.3f} ms |")
    print(f"| handled / dropped | {lat.size:,} / {dropped} |")


if __name__ == "__main__":
    uvloop.run(main())
