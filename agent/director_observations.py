"""What the Director has observed since its last run, in words for the LLM: the user's words, gestures and
salient sounds, interruptions, its plans that did not play, and its speech that was cut (what was heard)."""

from __future__ import annotations

import json

from agent.director_config import DirectorConfig
from agent.progress import BlockDropped, BlockInterrupted, CharacterSpeech
from events.bus import EventBus
from events.tracing import SPEECH_END, TRANSCRIBED, TURN_ENDED
from events.vocabulary import EndOfTurn, Event, Gesture, Interrupt, SoundClass, TextInput, Transcript


class Observations:
    """The lines the next run folds into the history, and the cut speech it rewrites to what was heard."""

    def __init__(self, config: DirectorConfig, bus: EventBus | None) -> None:
        self.config = config
        self.bus = bus
        self.lines: list[str] = []
        self.heard: list[tuple[str, str]] = []
        """(speech block id, the text the user heard) of each speech cut since the last run."""
        self._server_transcript: list[str] = []
        self._late_turn: str | None = None
        """A turn (its id) ended before its transcript came: the next server transcript is its words."""

    def clear(self) -> None:
        """Drop what was observed and not yet read (a story rewind leaves it behind)."""
        self.lines.clear()
        self.heard.clear()

    def answers(self, event: Event) -> bool:
        """Whether ``event`` asks the Director for an answer (its reply is then the input's outcome)."""
        return (
            isinstance(event, TextInput | EndOfTurn)
            or (isinstance(event, Transcript) and event.final)
            or self._salient(event)
        )

    def _salient(self, event: Event) -> bool:
        """A gesture or a sound the Director is configured to answer."""
        c = self.config
        return (isinstance(event, Gesture) and event.gesture in c.salient_gestures) or (
            isinstance(event, SoundClass) and event.label in c.salient_sounds and event.score >= 0.3
        )

    def take(self, event: Event) -> float | None:
        """Fold ``event`` into the lines: the debounce before the run it asks for, None when it asks for
        none."""
        trigger = False
        debounce_s = self.config.debounce_s
        if isinstance(event, EndOfTurn):
            debounce_s = self.config.turn_debounce_s
            text = (event.transcript or " ".join(self._server_transcript)).strip()
            self._server_transcript.clear()
            line = f"The user said: {json.dumps(text)}"
            if text and line not in self.lines:  # a client's final transcript may have said it already
                self.lines.append(line)
                trigger = True
            # A slow transcriber may finish after the turn ended: its transcript then answers this turn.
            self._late_turn = None if text else event.id
        elif isinstance(event, Transcript) and event.final:
            if event.source == "client" or self._late_turn is not None:
                if self._late_turn is not None:
                    debounce_s = self.config.turn_debounce_s
                    if self.bus is not None:
                        # The turn's trace carries on under the transcript, which is what the run answers.
                        self.bus.tracer.copy(self._late_turn, event.id, (SPEECH_END, TURN_ENDED))
                        self.bus.tracer.record(event.id, TRANSCRIBED, event.t_ns)
                self._late_turn = None
                self.lines.append(f"The user said: {json.dumps(event.text.strip())}")
                trigger = True
            else:
                self._server_transcript.append(event.text.strip())
        elif isinstance(event, TextInput):
            self.lines.append(f"The user typed: {json.dumps(event.text.strip())}")
            trigger = True
        elif isinstance(event, Gesture | SoundClass) and self._salient(event):
            self.lines.append(
                f"The user made a gesture: {event.gesture}"
                if isinstance(event, Gesture)
                else f"A sound was heard: {event.label}"
            )
            trigger = True
        elif isinstance(event, Interrupt):
            self.lines.append("The user interrupted you.")
        elif isinstance(event, CharacterSpeech) and event.state == "interrupted":
            self.heard.append((event.block_id, event.heard_text or ""))
            self.lines.append(f"You were cut off; the user heard only: {json.dumps(event.heard_text or '')}")
        elif isinstance(event, BlockDropped | BlockInterrupted):
            label = event.label or event.block_id
            self.lines.append(f"Your plan {json.dumps(label)} did not play to the end ({event.reason}).")
        return debounce_s if trigger else None
