"""Running a script: its timeline on the realizer's frame clock, its triggers on the bus's events.

``ScriptRunner`` submits each timeline entry's block when its time comes (``at_s`` after the script
starts, every ``loop_s`` when set) and each trigger's block when an event matches it or, for a silence
trigger, when the user has been silent for ``after_s``; ``RunnerState`` is where it is, as plain data, for
another front end to go on from. The script itself, and how it is loaded and checked: ``agent.script``.
"""

from __future__ import annotations

import asyncio
from collections import deque

import msgspec

from agent.bounds import MAX_FIRED_KEPT
from agent.idle import IdleVariety
from agent.plans import PlanError
from agent.realizer import Realizer, Submission
from agent.script import Script, SilenceTrigger, TimelineEntry, Trigger
from events.bus import EventBus
from events.vocabulary import (
    EndOfTurn,
    Event,
    Gesture,
    SoundClass,
    SpeechStarted,
    SpeechStopped,
    TextInput,
    Transcript,
)

USER_ACTIVITY: tuple[type[Event], ...] = (
    SpeechStarted,
    SpeechStopped,
    Transcript,
    TextInput,
    Gesture,
    EndOfTurn,
)
"""Events that end a silence: anything the user says, types or shows."""


class Fired(msgspec.Struct, frozen=True):
    """A record of one timeline entry or trigger submitting its block."""

    name: str
    chunk: int
    block_id: str
    cause: str | None


class RunnerState(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Where a ``ScriptRunner`` is in its script, as plain data (``ScriptRunner.state``): the script, the
    chunk its timeline began at, the next timeline entry and loop, when each trigger last fired, the
    triggers spent, the last user activity, the silence triggers armed, and the newest firings."""

    script: Script
    start: int | None
    next_entry: int
    loop: int
    last_fired: dict[int, int]
    spent: list[int]
    last_activity: int
    silence_armed: dict[int, bool]
    fired: list[Fired]


class ScriptRunner:
    """Runs a script against a realizer: the timeline on the frame clock, triggers on events.

    ``attach()`` hooks it to the realizer's clock (and installs the script's idle variety); feed events
    with ``on_event`` or let ``listen(bus)`` read them from the bus. Everything it submits is source
    ``script`` at the realizer's current script epoch.
    """

    def __init__(self, script: Script, realizer: Realizer) -> None:
        self.script = script
        self.realizer = realizer
        self.fired: deque[Fired] = deque(maxlen=MAX_FIRED_KEPT)
        """The newest firings, oldest first."""
        self._start: int | None = None
        self._next_entry = 0
        self._loop = 0
        self._last_fired: dict[int, int] = {}
        self._spent: set[int] = set()
        self._last_activity = 0
        self._silence_armed: dict[int, bool] = {}

    def state(self) -> RunnerState:
        """Where the runner is, for another front end to go on from (``from_state``)."""
        return RunnerState(
            script=self.script,
            start=self._start,
            next_entry=self._next_entry,
            loop=self._loop,
            last_fired=dict(self._last_fired),
            spent=sorted(self._spent),
            last_activity=self._last_activity,
            silence_armed=dict(self._silence_armed),
            fired=list(self.fired),
        )

    @classmethod
    def from_state(cls, state: RunnerState, realizer: Realizer) -> ScriptRunner:
        """A runner that goes on where ``state`` was: its timeline is not started again, and spent or
        cooling triggers stay so. ``attach`` it as a new one."""
        runner = cls(state.script, realizer)
        runner.fired.extend(state.fired)
        runner._start = state.start
        runner._next_entry, runner._loop = state.next_entry, state.loop
        runner._last_fired = dict(state.last_fired)
        runner._spent = set(state.spent)
        runner._last_activity = state.last_activity
        runner._silence_armed = dict(state.silence_armed)
        return runner

    def attach(self) -> None:
        """Follow the realizer's clock from its next tick."""
        self.realizer.idle = IdleVariety(self.script.idle)
        self.realizer.add_tick_listener(self.on_tick)

    def detach(self) -> None:
        """Stop following the realizer's clock; blocks already submitted play on (a new plan may replace
        them with ``composition = "replace"``)."""
        self.realizer.remove_tick_listener(self.on_tick)

    def _submit(
        self, cue: TimelineEntry | Trigger, name: str, k: int, cause: str | None
    ) -> Submission | None:
        block = cue.block(name, self.realizer.epoch("script"), cause)
        try:
            submission = self.realizer.submit(block)
        except PlanError:
            return None  # validated at load; a manifest change since then only skips this cue
        if submission.accepted:
            self.fired.append(Fired(name, k, submission.block_id, cause))
        return submission

    def _ready(self, index: int, trigger: Trigger, k: int) -> bool:
        if index in self._spent:
            return False
        last = self._last_fired.get(index)
        return last is None or (k - last) * self.realizer.manifest.chunk_s >= trigger.cooldown_s

    def _fire(self, index: int, trigger: Trigger, k: int, cause: str | None) -> Submission | None:
        self._last_fired[index] = k
        if trigger.once:
            self._spent.add(index)
        return self._submit(trigger, trigger.name or f"trigger[{index}]", k, cause)

    def on_event(self, event: Event) -> list[Submission]:
        """Fire every trigger ``event`` matches; user activity also ends a silence."""
        k = self.realizer.chunk + 1  # between ticks: the event lands in the next chunk decided
        if isinstance(event, USER_ACTIVITY):
            self._last_activity = k
            for index in self._silence_armed:
                self._silence_armed[index] = True
        submitted = []
        for index, trigger in enumerate(self.script.trigger):
            if trigger.matches(event) and self._ready(index, trigger, k):
                submission = self._fire(index, trigger, k, event.id)
                if submission is not None:
                    submitted.append(submission)
        return submitted

    def on_tick(self, k: int) -> None:
        """Start timeline entries whose time has come and fire silence triggers (realizer tick hook)."""
        if self._start is None:
            self._start = k
            self._last_activity = k
        chunk_s = self.realizer.manifest.chunk_s
        elapsed = (k - self._start) * chunk_s
        loop_s = self.script.loop_s
        timeline = self.script.timeline
        # At most one pass over the timeline per chunk, whatever its times say: a chunk's work stays bounded
        # (with validated times, one pass is all that can fall due in one chunk anyway).
        for _ in range(len(timeline)):
            if self._next_entry >= len(timeline):
                if loop_s is None:
                    break
                self._next_entry, self._loop = 0, self._loop + 1
            entry = timeline[self._next_entry]
            at = entry.at_s + (self._loop * loop_s if loop_s is not None else 0.0)
            if at > elapsed + 1e-9:
                break
            self._submit(entry, entry.label or f"timeline[{self._next_entry}]", k, None)
            self._next_entry += 1
        silent_s = (k - self._last_activity) * chunk_s
        for index, trigger in enumerate(self.script.trigger):
            if not isinstance(trigger, SilenceTrigger):
                continue
            armed = self._silence_armed.setdefault(index, True)
            if armed and silent_s >= trigger.after_s and self._ready(index, trigger, k):
                self._silence_armed[index] = False
                self._fire(index, trigger, k, None)

    def listen(self, bus: EventBus) -> asyncio.Task[None]:
        """Subscribe to ``bus`` now (no event published after this call is missed) and return the task
        that feeds its trigger events to ``on_event`` until the bus closes or the task is cancelled."""
        types: set[type[Event]] = {SoundClass, *USER_ACTIVITY}
        sub = bus.subscribe(*types, name=f"script:{self.script.name}", where=_is_input, reactive=True)

        async def feed() -> None:
            try:
                async for event in sub:
                    self.on_event(event)
            finally:
                sub.close()

        return asyncio.create_task(feed(), name=f"script:{self.script.name}")


def _is_input(event: Event) -> bool:
    # Partial transcripts are a stream of guesses; only final ones count as the user saying something.
    return not isinstance(event, Transcript) or event.final
