"""What the character does when the Director has no usable answer to something the user said or did.

The LLM may answer with nothing usable (an empty message, broken or unknown tool calls, arguments that fail
validation twice) or not at all (the endpoint refuses, hangs, errs). The user must still see that they were
heard: the session's script lends its own answer to that event (the first of its triggers that the event
fires, e.g. the greeter's nod and "I see." at the end of a turn), and without one the character nods (or,
for a model that cannot nod, looks at the user).
"""

from __future__ import annotations

import msgspec

from agent.plans import Action, Behavior, Block, Gaze
from agent.script import Script, SilenceTrigger
from events.vocabulary import Event
from streaming_model.manifest import Manifest

LABEL = "acknowledge"
"""The label of every acknowledgement block: the client sees it as the ``director.plan`` summary."""

NOD_S = 1.0


class Acknowledgement:
    """Makes the block that acknowledges an event the Director could not answer."""

    def __init__(self, manifest: Manifest, script: Script | None = None) -> None:
        self._triggers = [t for t in script.trigger if not isinstance(t, SilenceTrigger)] if script else []
        nod = any(a.name == "nod" for a in manifest.actions)
        self._default: Behavior = (
            Action(name="nod", duration_s=NOD_S) if nod else Gaze(x=0.0, y=0.0, duration_s=NOD_S)
        )

    def block(self, event: Event) -> Block:
        """The script's answer to ``event`` if it has one, else a nod; labelled ``acknowledge``."""
        for trigger in self._triggers:
            if trigger.matches(event):
                # The Director stamps source and epoch; the label is always ours, for the client to see.
                return msgspec.structs.replace(trigger.block(LABEL, 0, event.id), label=LABEL)
        return Block(behaviors=[self._default], label=LABEL, cause=event.id)
