"""The default reflex policy: fast, small reactions that make the character feel present.

Each reflex is a short block of source ``reflex`` handed to the realizer the moment its event arrives, so
it shows in the next chunk decided (or in the chunk in flight, when the conductor regenerates it). Being
outranked only by user commands and safety, a reflex borrows the body, eyes or face and hands them back
when it ends; the script or the Director carries on underneath.

- The user starts speaking: eyes on the user, body settles, a nod every few seconds while listening;
  released when the user stops.
- A sudden sound (onset): a startle with wide eyes; once the sound has a class (a knock, a clap), a look
  toward where such a sound comes from.
- Gestures: a wave is waved back, a thumbs-up makes it happy, pointing makes it look there, a raised hand
  gets its attention.
- Typed text: eyes on the user and a nod, so the user sees it was read while the mind works on an answer.

Cooldowns are in seconds on the realizer's clock (its manifest's chunk length). A reflex asks only for
what the realizer's manifest lists: an action the model lacks becomes the stand-in its backend declares,
else it is left out, as an emotion it lacks is (a ``look_at`` it lacks becomes a gaze at the same point,
``plan_checks.within_manifest``); a reflex left with nothing declines.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Literal

import msgspec

from agent.plan_checks import within_manifest
from agent.plans import Action, Behavior, Block, Emotion, Gaze, SyncRef
from agent.realizer import Realizer, Submission
from events.bus import EventBus
from events.vocabulary import (
    EndOfTurn,
    Event,
    Gesture,
    SoundClass,
    SoundOnset,
    SpeechStarted,
    SpeechStopped,
    TextInput,
)


class ReflexConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Which reflexes are on, and their thresholds. Sound looks map a YAMNet label to a screen point."""

    attentive: bool = True
    listen_max_s: float = 15.0
    nod_every_s: float = 3.0
    startle: bool = True
    startle_min_db: float = 0.0
    startle_cooldown_s: float = 2.0
    sound_looks: dict[str, tuple[float, float]] = msgspec.field(
        default_factory=lambda: {
            "Knock": (0.9, 0.0),
            "Doorbell": (0.9, -0.2),
            "Clapping": (0.0, -0.3),
            "Finger snapping": (0.0, -0.3),
        }
    )
    sound_min_score: float = 0.3
    gestures: bool = True
    gesture_min_confidence: float = 0.5
    gesture_cooldown_s: float = 2.0
    text_nod: bool = True
    text_cooldown_s: float = 2.0


DECLINES_REMEMBERED = 256
"""How many recent inputs the policy remembers declining (``ReflexPolicy.declined``)."""

Decline = tuple[Literal["cooldown", "no_reaction"], str]


class ReflexPolicy:
    """Turns events into reflex blocks for one session's realizer."""

    def __init__(
        self,
        realizer: Realizer,
        config: ReflexConfig | None = None,
        fallbacks: Mapping[str, str] | None = None,
    ) -> None:
        self.realizer = realizer
        self.config = config or ReflexConfig()
        self.fallbacks = dict(fallbacks or {})
        """The backend's stand-ins for actions it lacks (``BackendManifest.fallbacks``)."""
        self._listening: str | None = None
        self._last: dict[str, int] = {}
        self.declined: dict[str, Decline] = {}
        """Input event id -> why no reflex answered it (recent ones), for the client's ``input.outcome``."""
        self._event_id = ""

    def _cooled(self, key: str, cooldown_s: float) -> bool:
        k = self.realizer.chunk + 1
        last = self._last.get(key)
        chunk_s = self.realizer.manifest.chunk_s
        if last is not None and (k - last) * chunk_s < cooldown_s:
            left = cooldown_s - (k - last) * chunk_s
            self._decline("cooldown", f"the {key} reflex is cooling down ({left:.1f} s left)")
            return False
        self._last[key] = k
        return True

    def _decline(self, reason: Literal["cooldown", "no_reaction"], detail: str) -> None:
        self.declined[self._event_id] = (reason, detail)
        if len(self.declined) > DECLINES_REMEMBERED:
            del self.declined[next(iter(self.declined))]

    def _submit(
        self, event: Event, behaviors: list[Behavior], label: str, priority: int = 0
    ) -> Submission | None:
        behaviors = within_manifest(behaviors, self.realizer.manifest, self.fallbacks)
        if not behaviors:
            self._decline("no_reaction", f"the model can show nothing of the {label} reflex")
            return None
        block = Block(
            behaviors=behaviors,
            source="reflex",
            priority=priority,
            epoch=self.realizer.epoch("reflex"),
            cause=event.id,
            label=label,
        )
        return self.realizer.submit(block)

    def on_event(self, event: Event) -> Submission | None:
        """React to ``event`` now; returns the submitted block's receipt, or None if nothing fires (why
        is then in ``declined``)."""
        self._event_id = event.id
        answer = self._react(event)
        if answer is None and event.id not in self.declined:
            self._decline("no_reaction", f"no reflex answers this {type(event).__struct_config__.tag}")
        return answer

    def imagine(self, event: Event) -> None:
        """React to ``event`` as ``on_event`` would, then forget having reacted (cooldowns, declines, the
        listening pose): for ``Realizer.foresee``, which forgets what was submitted."""
        kept = (dict(self._last), dict(self.declined), self._listening, self._event_id)
        try:
            self._event_id = event.id
            self._react(event)
        finally:
            self._last, self.declined, self._listening, self._event_id = kept

    def _react(self, event: Event) -> Submission | None:
        c = self.config
        if isinstance(event, SpeechStarted) and c.attentive:
            return self._listen(event)
        if isinstance(event, SpeechStopped | EndOfTurn):
            if self._listening is not None:
                self.realizer.cancel(self._listening)
                self._listening = None
            return None
        if isinstance(event, SoundOnset):
            if (
                c.startle
                and event.strength_db >= c.startle_min_db
                and self._cooled("startle", c.startle_cooldown_s)
            ):
                startle: list[Behavior] = [
                    Action(name="startle"),
                    Emotion(emotion="surprised", duration_s=1.0),
                ]
                return self._submit(event, startle, "startle", priority=1)
            return None
        if isinstance(event, SoundClass):
            look = c.sound_looks.get(event.label)
            if look is not None and event.score >= c.sound_min_score and self._cooled(event.label, 2.0):
                x, y = look
                glance = Action(name="look_at", params={"target_x": x, "target_y": y}, duration_s=1.5)
                return self._submit(event, [glance], f"look toward {event.label}")
            return None
        if isinstance(event, TextInput) and c.text_nod and self._cooled("text", c.text_cooldown_s):
            read: list[Behavior] = [Gaze(x=0.0, y=0.0, duration_s=1.5), Action(name="nod", duration_s=0.8)]
            return self._submit(event, read, "acknowledge text")
        if isinstance(event, Gesture) and c.gestures and event.confidence >= c.gesture_min_confidence:
            behaviors = self._gesture(event)
            if behaviors and self._cooled(f"gesture:{event.gesture}", c.gesture_cooldown_s):
                return self._submit(event, behaviors, f"answer {event.gesture}")
        return None

    def _listen(self, event: SpeechStarted) -> Submission | None:
        c = self.config
        if self._listening is not None:
            self.realizer.cancel(self._listening)
        behaviors: list[Behavior] = [
            Gaze(id="eyes", x=0.0, y=0.0, duration_s=c.listen_max_s),
            Action(name="idle", duration_s=0.5),
        ]
        nods = int(c.listen_max_s // c.nod_every_s) if c.nod_every_s > 0 else 0
        behaviors += [
            Action(name="nod", duration_s=0.8, start=SyncRef(offset_s=i * c.nod_every_s))
            for i in range(1, nods)
        ]
        submission = self._submit(event, behaviors, "listening")
        self._listening = submission.block_id if submission is not None and submission.accepted else None
        return submission

    @staticmethod
    def _gesture(event: Gesture) -> list[Behavior]:
        if event.gesture == "wave":
            return [Action(name="wave", duration_s=1.5), Emotion(emotion="happy", duration_s=1.5)]
        if event.gesture == "thumbs_up":
            return [Emotion(emotion="happy", duration_s=2.0), Action(name="nod", duration_s=1.0)]
        if event.gesture == "point" and event.x is not None:
            # Client coordinates are 0..1 of the user's image; the character looks the same way on screen.
            x, y = 2.0 * event.x - 1.0, 2.0 * (event.y if event.y is not None else 0.5) - 1.0
            return [Action(name="look_at", params={"target_x": x, "target_y": y}, duration_s=1.5)]
        if event.gesture == "raise_hand":
            return [Gaze(x=0.0, y=0.0, duration_s=2.0), Action(name="idle", duration_s=1.0)]
        if event.gesture == "nod":  # the user agrees: the character nods with them
            return [Action(name="nod", duration_s=1.0)]
        if event.gesture == "shake_head":  # the user disagrees: the character is a little abashed
            return [Emotion(emotion="sad", duration_s=1.5)]
        return []

    def listen(self, bus: EventBus) -> asyncio.Task[None]:
        """Subscribe to ``bus`` now and react to its events in a task. The subscription is reactive: the
        conductor's ``bus.settle()`` waits for it before re-deciding the chunk in flight."""
        sub = bus.subscribe(
            SpeechStarted,
            SpeechStopped,
            EndOfTurn,
            SoundOnset,
            SoundClass,
            Gesture,
            TextInput,
            name="reflex",
            reactive=True,
        )

        async def react() -> None:
            try:
                async for event in sub:
                    self.on_event(event)
            finally:
                sub.close()

        return asyncio.create_task(react(), name="reflex")
