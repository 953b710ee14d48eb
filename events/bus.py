"""The asyncio event bus: typed subscriptions, one bounded two-lane queue per subscriber.

Design rules, each with its reason:
- Every subscriber has its own bounded queue, so a slow subscriber can only fall behind itself; nothing
  grows without bound. What happens when its queue is full is the subscriber's stated ``Overflow`` policy.
- Each queue has two lanes. Control events (interrupt, speech started, gestures...) are handed out before
  any pending bulk event (audio levels, partial transcripts), so a reflex never waits behind a backlog.
- Publishing never waits for a subscriber, except one that chose ``Overflow.BLOCK``: it is served after
  every other subscriber has its event, so even then a slow subscriber never delays a fast one.
"""

from __future__ import annotations

import asyncio
import enum
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable

from events.tracing import Tracer
from events.vocabulary import Event

Predicate = Callable[[Event], bool]


class Overflow(enum.Enum):
    """What a subscriber's full queue does with a new event."""

    BLOCK = "block"
    """The publisher waits for room (back-pressure). For consumers that must see every event."""
    DROP_OLDEST = "drop_oldest"
    """The oldest pending event of the same lane is discarded to make room (counted in ``dropped``)."""
    KEEP_LATEST = "keep_latest"
    """Each lane holds only its newest pending event: for consumers that want the current state."""


class BusClosed(RuntimeError):
    """Raised when publishing to a bus that has been closed."""


class SubscriptionClosed(Exception):
    """Raised by ``Subscription.get`` once the subscription is closed and its queue is empty."""


class Subscription:
    """One subscriber's view of the bus: a bounded two-lane queue of the events it asked for.

    Read with ``await sub.get()`` or ``async for event in sub``; iteration ends when the subscription or
    the bus is closed and the events still pending have been read.
    """

    def __init__(
        self,
        bus: EventBus,
        types: tuple[type[Event], ...],
        where: Predicate | None,
        name: str,
        maxsize: int,
        overflow: Overflow,
        reactive: bool = False,
    ) -> None:
        if maxsize < 1:
            raise ValueError(f"maxsize must be at least 1, got {maxsize}")
        self.name = name
        self.types = types
        self.where = where
        self.maxsize = 1 if overflow is Overflow.KEEP_LATEST else maxsize
        self.overflow = overflow
        self.reactive = reactive
        """Its reader handles each event before it takes the next (``EventBus.settle`` waits for it)."""
        self.delivered = 0
        self.dropped = 0
        self._bus = bus
        self._lanes: tuple[deque[Event], deque[Event]] = (deque(), deque())
        self._waiter: asyncio.Future[None] | None = None
        self._space: asyncio.Future[None] | None = None
        self._settles: list[asyncio.Future[None]] = []
        self._closed = False

    def accepts(self, event: Event) -> bool:
        """Whether this subscription wants ``event`` (its types, then its predicate)."""
        if self.types and not isinstance(event, self.types):
            return False
        return self.where is None or self.where(event)

    @property
    def closed(self) -> bool:
        return self._closed

    def pending(self) -> int:
        """Events waiting to be read, both lanes together."""
        return len(self._lanes[0]) + len(self._lanes[1])

    def _offer(self, event: Event) -> bool:
        """Queue ``event``; False only when the queue is full and the policy is ``BLOCK``."""
        lane = self._lanes[event.lane]
        if len(lane) >= self.maxsize:
            if self.overflow is Overflow.BLOCK:
                return False
            lane.popleft()
            self.dropped += 1
        lane.append(event)
        self.delivered += 1
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        return True

    async def _wait_for_space(self) -> None:
        loop = asyncio.get_running_loop()
        if self._space is None or self._space.done():
            self._space = loop.create_future()
        await self._space

    def get_nowait(self) -> Event | None:
        """The next event (control lane first), or None if nothing is pending."""
        for lane in self._lanes:
            if lane:
                event = lane.popleft()
                space = self._space
                if space is not None and not space.done():
                    space.set_result(None)
                return event
        return None

    async def get(self) -> Event:
        """Wait for the next event; raises ``SubscriptionClosed`` once closed and drained."""
        while True:
            event = self.get_nowait()
            if event is not None:
                return event
            if self._closed:
                raise SubscriptionClosed(self.name)
            self._waiter = asyncio.get_running_loop().create_future()
            self._wake_settles()  # the reader is done with everything it took
            try:
                await self._waiter
            finally:
                self._waiter = None

    async def settled(self) -> None:
        """Return once nothing is pending and the reader is back waiting in ``get`` (it has finished with
        every event it took), or the subscription is closed."""
        while not self._closed and (self.pending() or self._waiter is None):
            future = asyncio.get_running_loop().create_future()
            self._settles.append(future)
            await future

    def _wake_settles(self) -> None:
        settles, self._settles = self._settles, []
        for future in settles:
            if not future.done():
                future.set_result(None)

    def __aiter__(self) -> AsyncIterator[Event]:
        return self

    async def __anext__(self) -> Event:
        try:
            return await self.get()
        except SubscriptionClosed:
            raise StopAsyncIteration from None

    def close(self) -> None:
        """Stop receiving; events already queued can still be read. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._bus._remove(self)
        for future in (self._waiter, self._space):
            if future is not None and not future.done():
                future.set_result(None)
        self._wake_settles()


class EventBus:
    """Publishes events to every subscription that accepts them, and records each in the tracer."""

    def __init__(self, tracer: Tracer | None = None) -> None:
        self.tracer = tracer if tracer is not None else Tracer()
        self._subs: list[Subscription] = []
        self._closed = False

    @property
    def subscriptions(self) -> tuple[Subscription, ...]:
        return tuple(self._subs)

    def subscribe(
        self,
        *types: type[Event],
        where: Predicate | None = None,
        name: str = "",
        maxsize: int = 1024,
        overflow: Overflow = Overflow.DROP_OLDEST,
        reactive: bool = False,
    ) -> Subscription:
        """Subscribe to events of ``types`` (all events if none) that pass ``where``. A ``reactive``
        subscriber promises to handle each event before it takes the next, without waiting on anything
        slow (reflexes, script triggers): ``settle`` waits for those."""
        if self._closed:
            raise BusClosed("cannot subscribe to a closed bus")
        name = name or f"sub{len(self._subs) + 1}"
        sub = Subscription(self, types, where, name, maxsize, overflow, reactive)
        self._subs.append(sub)
        return sub

    def _remove(self, sub: Subscription) -> None:
        if sub in self._subs:
            self._subs.remove(sub)

    def _deliver(self, event: Event) -> list[Subscription]:
        if self._closed:
            raise BusClosed(f"cannot publish {type(event).__name__} {event.id}: the bus is closed")
        self.tracer.record_event(event)
        blocked = []
        for sub in self._subs:
            if sub.accepts(event) and not sub._offer(event):
                blocked.append(sub)
        return blocked

    async def publish(self, event: Event) -> None:
        """Deliver ``event``; waits only for full ``BLOCK`` subscribers, after all others have it."""
        for sub in self._deliver(event):
            while not sub.closed and not sub._offer(event):
                await sub._wait_for_space()

    def publish_nowait(self, event: Event) -> int:
        """Deliver without waiting; returns how many full ``BLOCK`` subscribers could not take it."""
        return len(self._deliver(event))

    async def settle(self) -> None:
        """Wait until every reactive subscriber has handled everything published so far: what follows
        (a re-decision of the chunk in flight) sees their answers."""
        for sub in [s for s in self._subs if s.reactive]:
            await sub.settled()

    async def publish_all(self, events: Iterable[Event]) -> None:
        """Publish several events in order."""
        for event in events:
            await self.publish(event)

    def close(self) -> None:
        """Close every subscription (pending events stay readable) and refuse further publishing."""
        self._closed = True
        for sub in list(self._subs):
            sub.close()
