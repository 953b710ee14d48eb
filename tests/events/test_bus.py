"""The event bus: typed subscriptions, bounded two-lane queues, overflow policies, shutdown, tracing."""

from __future__ import annotations

import asyncio

import pytest

from events.bus import BusClosed, EventBus, Overflow, SubscriptionClosed
from events.stamp import Stamper
from events.vocabulary import AudioLevel, Gesture, Interrupt, SpeechStarted, TextInput, Transcript

stamp = Stamper("s1")


def level(ms: float) -> AudioLevel:
    return stamp(AudioLevel, audio_ms=ms, rms_db=-30.0, peak=0.1)


async def test_a_subscriber_gets_only_the_types_it_asked_for() -> None:
    bus = EventBus()
    speech = bus.subscribe(SpeechStarted)
    everything = bus.subscribe()
    await bus.publish(level(0))
    await bus.publish(stamp(SpeechStarted, audio_ms=10.0))
    assert [type(e) for e in [speech.get_nowait(), speech.get_nowait()]] == [SpeechStarted, type(None)]
    assert everything.pending() == 2


async def test_a_predicate_narrows_a_subscription() -> None:
    bus = EventBus()
    waves = bus.subscribe(Gesture, where=lambda e: isinstance(e, Gesture) and e.gesture == "wave")
    await bus.publish(stamp(Gesture, gesture="point"))
    await bus.publish(stamp(Gesture, gesture="wave"))
    got = waves.get_nowait()
    assert isinstance(got, Gesture) and got.gesture == "wave"
    assert waves.get_nowait() is None


async def test_control_events_overtake_pending_bulk_events() -> None:
    bus = EventBus()
    sub = bus.subscribe()
    for i in range(5):
        await bus.publish(level(i))
    await bus.publish(stamp(Interrupt))
    await bus.publish(stamp(Transcript, text="hel", final=False))
    await bus.publish(stamp(Transcript, text="hello", final=True))
    order = [await sub.get() for _ in range(8)]
    assert isinstance(order[0], Interrupt)
    assert isinstance(order[1], Transcript) and order[1].final
    assert all(isinstance(e, AudioLevel) for e in order[2:7])
    assert isinstance(order[7], Transcript) and not order[7].final


async def test_drop_oldest_keeps_the_newest_events_and_counts_the_dropped() -> None:
    bus = EventBus()
    sub = bus.subscribe(AudioLevel, maxsize=3, overflow=Overflow.DROP_OLDEST)
    for i in range(10):
        await bus.publish(level(i))
    got = [await sub.get() for _ in range(3)]
    assert [e.audio_ms for e in got if isinstance(e, AudioLevel)] == [7, 8, 9]
    assert sub.dropped == 7


async def test_keep_latest_holds_one_pending_event_per_lane() -> None:
    bus = EventBus()
    sub = bus.subscribe(overflow=Overflow.KEEP_LATEST)
    for i in range(4):
        await bus.publish(level(i))
    await bus.publish(stamp(SpeechStarted, audio_ms=1.0))
    await bus.publish(stamp(SpeechStarted, audio_ms=2.0))
    first, second = await sub.get(), await sub.get()
    assert isinstance(first, SpeechStarted) and first.audio_ms == 2.0
    assert isinstance(second, AudioLevel) and second.audio_ms == 3
    assert sub.pending() == 0


async def test_a_blocking_subscriber_applies_back_pressure_without_delaying_others() -> None:
    bus = EventBus()
    slow = bus.subscribe(maxsize=1, overflow=Overflow.BLOCK, name="slow")
    fast = bus.subscribe(name="fast")
    await bus.publish(stamp(TextInput, text="one"))
    second = asyncio.create_task(bus.publish(stamp(TextInput, text="two")))
    await asyncio.sleep(0.01)
    # The fast subscriber already holds both events while the publisher waits for the slow one.
    assert fast.pending() == 2
    assert not second.done()
    one = await slow.get()
    assert isinstance(one, TextInput) and one.text == "one"
    await asyncio.wait_for(second, 1.0)
    two = await slow.get()
    assert isinstance(two, TextInput) and two.text == "two"
    assert slow.dropped == 0


async def test_publish_nowait_reports_full_blocking_subscribers() -> None:
    bus = EventBus()
    bus.subscribe(maxsize=1, overflow=Overflow.BLOCK)
    assert bus.publish_nowait(stamp(TextInput, text="a")) == 0
    assert bus.publish_nowait(stamp(TextInput, text="b")) == 1


async def test_a_waiting_subscriber_wakes_when_an_event_arrives() -> None:
    bus = EventBus()
    sub = bus.subscribe()
    getter = asyncio.create_task(sub.get())
    await asyncio.sleep(0)
    await bus.publish(stamp(TextInput, text="hi"))
    got = await asyncio.wait_for(getter, 1.0)
    assert isinstance(got, TextInput) and got.text == "hi"


async def test_unsubscribing_stops_delivery_but_keeps_what_was_queued() -> None:
    bus = EventBus()
    sub = bus.subscribe()
    kept = stamp(TextInput, text="kept")
    await bus.publish(kept)
    sub.close()
    await bus.publish(stamp(TextInput, text="missed"))
    assert [e async for e in sub] == [kept]
    assert sub not in bus.subscriptions


async def test_closing_the_bus_ends_every_reader_and_refuses_publishing() -> None:
    bus = EventBus()
    subs = [bus.subscribe() for _ in range(3)]
    readers = [asyncio.create_task(_drain(s)) for s in subs]
    await bus.publish(stamp(TextInput, text="last"))
    bus.close()
    assert await asyncio.wait_for(asyncio.gather(*readers), 1.0) == [["last"]] * 3
    with pytest.raises(BusClosed):
        await bus.publish(stamp(TextInput, text="late"))
    with pytest.raises(BusClosed):
        bus.subscribe()


async def test_a_closed_blocking_subscriber_releases_a_waiting_publisher() -> None:
    bus = EventBus()
    sub = bus.subscribe(maxsize=1, overflow=Overflow.BLOCK)
    await bus.publish(stamp(TextInput, text="a"))
    waiting = asyncio.create_task(bus.publish(stamp(TextInput, text="b")))
    await asyncio.sleep(0.01)
    sub.close()
    await asyncio.wait_for(waiting, 1.0)


async def test_queues_stay_bounded_under_a_flood() -> None:
    bus = EventBus()
    subs = [bus.subscribe(maxsize=64), bus.subscribe(overflow=Overflow.KEEP_LATEST)]
    for i in range(20_000):
        bus.publish_nowait(level(i))
    assert subs[0].pending() == 64 and subs[1].pending() == 1
    assert subs[0].dropped == 20_000 - 64


async def test_the_tracer_measures_time_from_arrival_to_a_handling_stage() -> None:
    bus = EventBus()
    sub = bus.subscribe()
    event = stamp(Gesture, gesture="wave")
    await bus.publish(event)
    got = await sub.get()
    bus.tracer.record(got.id, "reflex")
    latency = bus.tracer.latency_ms(event.id, "reflex")
    assert latency is not None and 0.0 <= latency < 1000.0
    assert set(bus.tracer.stages(event.id)) == {"arrived", "published", "reflex"}
    assert bus.tracer.latency_ms(event.id, "never") is None


def test_the_tracer_forgets_the_oldest_events_beyond_its_bound() -> None:
    from events.tracing import Tracer

    tracer = Tracer(max_events=100)
    seen: list[str] = []
    tracer.add_sink(lambda event_id, stage, t: seen.append(event_id))
    for i in range(1000):
        tracer.record(f"e{i}", "stage", t_ns=i)
    assert len(tracer) == 100
    assert tracer.stages("e0") == {} and tracer.stages("e999") == {"stage": 999}
    assert len(seen) == 1000


async def _drain(sub) -> list[str]:
    return [e.text async for e in sub]


async def test_settle_returns_once_every_reactive_subscriber_has_handled_what_was_published() -> None:
    bus = EventBus()
    handled: list[str] = []
    reactive = bus.subscribe(Gesture, reactive=True)
    bus.subscribe(Gesture)  # nobody reads this one: settle does not wait for it

    async def reader() -> None:
        async for event in reactive:
            handled.append(event.id)

    task = asyncio.create_task(reader())
    events = [stamp(Gesture, gesture="wave") for _ in range(3)]
    for event in events:
        bus.publish_nowait(event)
    assert handled == []
    await bus.settle()
    assert handled == [e.id for e in events]
    bus.close()
    await task


async def test_settle_waits_for_a_reactive_reader_that_has_not_started_yet() -> None:
    bus = EventBus()
    reactive = bus.subscribe(Gesture, reactive=True)
    bus.publish_nowait(stamp(Gesture, gesture="wave"))
    settled = asyncio.create_task(bus.settle())
    await asyncio.sleep(0.01)
    assert not settled.done()  # its event is still pending
    assert reactive.get_nowait() is not None
    reader = asyncio.create_task(reactive.get())  # back waiting: done with what it took
    await asyncio.wait_for(settled, 1.0)
    bus.close()
    with pytest.raises(SubscriptionClosed):
        await reader
