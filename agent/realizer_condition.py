"""The condition of one chunk: what the channels' holders (or, on free channels, the idle variety) make the
character do, with the mouth's loudness and the scene's parts."""

from __future__ import annotations

import math
from collections.abc import Iterable

from agent.idle import IdleMoment, IdleVariety
from agent.plan_timing import WALK_SPEED_PER_S
from agent.plans import (
    WALKS,
    Action,
    Behavior,
    Emotion,
    Gaze,
    Move,
    SceneEvent,
    SetScene,
    Speech,
)
from agent.realizer_arbitration import Winners
from agent.realizer_state import Entry, Voice
from agent.realizer_timing import Timeline
from streaming_model.condition import ChunkCondition
from streaming_model.manifest import Manifest


class Conditions:
    """Turns who holds each channel in a chunk into that chunk's ``ChunkCondition`` (one per realizer)."""

    def __init__(self, manifest: Manifest, timeline: Timeline) -> None:
        self.manifest = manifest
        self._timeline = timeline
        self._sets = {a.name: dict(a.sets) for a in manifest.actions if a.sets}

    def decide(
        self,
        k: int,
        winners: Winners,
        entries: Iterable[Entry],
        idle: IdleVariety,
        position: float,
        scene: dict[str, str],
    ) -> tuple[ChunkCondition, tuple[str, ...], float]:
        """Chunk ``k``'s condition, the scene events it starts, and the character's floor x after it
        (``position`` is where it stood before). ``scene`` (part -> choice) takes the parts set in chunk k."""
        moment = idle.at(k, self.manifest)
        action, target, paw, side = self._body(winners.get("body"), moment, position)
        if action in WALKS:
            step = WALK_SPEED_PER_S * self.manifest.chunk_s
            position = min(1.0, max(-1.0, position + (step if action == WALKS[1] else -step)))
        gaze = _gaze(winners.get("gaze"), action, target, moment)
        emotion = _emotion(winners.get("face"))
        speaking = False
        audio = (0.0,) * self.manifest.frames_per_chunk
        voice_claim = winners.get("voice")
        if voice_claim is not None and isinstance(voice_claim[1], Speech):
            voice = voice_claim[0].voices[voice_claim[1].id]
            speaking = True
            audio = self._envelope(voice, k)
        events = self._scene(k, winners, entries, action, scene)
        condition = ChunkCondition(
            action=action,
            target=target,
            gaze=gaze,
            paw=paw,
            side=side,
            emotion=emotion,
            speaking=speaking,
            audio=audio,
            scene=tuple(scene.items()),
        )
        return condition, events, position

    def _body(
        self, body: tuple[Entry, Behavior | None] | None, moment: IdleMoment, position: float
    ) -> tuple[str, tuple[float, float], str, str]:
        """The action, its target, paw and side: the body's holder's, or the idle one on a free body."""
        action, target, paw, side = "idle", (0.0, 0.0), "right", "other"
        if body is None:
            action, target = moment.action, moment.target
        else:
            b = body[1]
            if isinstance(b, Action):
                action = b.name
                paw = str(b.params.get("paw", "right"))
                side = str(b.params.get("side", "other"))
                target = (float(b.params.get("target_x", 0.0)), float(b.params.get("target_y", 0.0)))
            elif isinstance(b, Move):
                step = WALK_SPEED_PER_S * self.manifest.chunk_s
                if abs(b.x - position) > step / 2:
                    action = WALKS[1] if b.x > position else WALKS[0]
        return action, target, paw, side

    def _envelope(self, voice: Voice, k: int) -> tuple[float, ...]:
        """The voice's loudness for chunk k's frames: reported by the server, or a syllable-like guess."""
        assert voice.start is not None
        n, fps = self.manifest.frames_per_chunk, self.manifest.fps
        first = (k - voice.start) * n
        if voice.envelope:
            values = voice.envelope[first : first + n]
            return tuple(values) + (0.0,) * (n - len(values))
        # About four syllables a second: the mouth opens and closes rather than hanging open.
        return tuple(
            round(0.55 + 0.4 * math.sin(2 * math.pi * 4.0 * (first + i) / fps + 0.7), 3) for i in range(n)
        )

    def _scene(
        self, k: int, winners: Winners, entries: Iterable[Entry], action: str, scene: dict[str, str]
    ) -> tuple[str, ...]:
        """The scene event chunk k starts (its holder's, on the scene channel); ``scene`` takes the parts
        set in chunk k."""
        events: tuple[str, ...] = ()
        scene_claim = winners.get("scene")
        if scene_claim is not None and isinstance(scene_claim[1], SceneEvent):
            if self._timeline.start_chunk(scene_claim[0], scene_claim[1]) == k:
                events = (scene_claim[1].name,)
        # Every scene change due now applies, whoever holds the scene channel: the parts are state, not a
        # contested channel (of two changes to one part in a chunk, the later block's wins).
        for entry in entries:
            if entry.start is not None:
                for b in entry.block.behaviors:
                    if isinstance(b, SetScene) and self._timeline.start_chunk(entry, b) == k:
                        scene.update(b.changes)
        # An action toward the scene may set part of it (opening the door leaves it open).
        scene.update(self._sets.get(action, {}))
        return events


def _gaze(
    claim: tuple[Entry, Behavior | None] | None,
    action: str,
    target: tuple[float, float],
    moment: IdleMoment,
) -> tuple[float, float]:
    """Where the eyes look: the gaze's holder's point, the look_at target, or the idle gaze."""
    if claim is None:
        return target if action == "look_at" else moment.gaze
    if isinstance(claim[1], Gaze):
        return (claim[1].x, claim[1].y)
    return (0.0, 0.0)


def _emotion(face: tuple[Entry, Behavior | None] | None) -> str:
    """The face's holder's emotion (an emotion, or speech said with one), else neutral."""
    if face is not None and isinstance(face[1], Emotion):
        return face[1].emotion
    if face is not None and isinstance(face[1], Speech) and face[1].emotion is not None:
        return face[1].emotion
    return "neutral"
