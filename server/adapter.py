"""The WebSocket protocol (docs/protocol.md) for one session core: client messages into its inputs, its
outputs into protocol messages and media frames.

The core (``server.core``) knows no wire format; this is the one place that maps between the two, so
another transport (WebRTC, a framework's service) maps the same core its own way.
"""

from __future__ import annotations

import msgspec

from agent.progress import CharacterSpeech, DirectorError, DirectorPlan
from events.errors import BadInput
from events.gestures import client_gesture
from events.vocabulary import (
    Event,
    Gesture,
    Interrupt,
    SoundClass,
    SoundOnset,
    SpeechStarted,
    SpeechStopped,
    TextInput,
    Transcript,
)
from server import protocol as p
from server.client_camera import CameraGestures
from server.client_camera import handle as handle_camera
from server.client_voice import CLIENT_VOICE_MESSAGES, voice_of
from server.client_voice import handle as handle_voice
from server.core.conductor import Conductor, Refused
from server.core.outputs import AudioOut, Figures, Output, SceneChanged, StoryMoved, Unshown, VideoOut
from streaming_model.worker import WorkerMoved


class ProtocolAdapter:
    """One session's protocol: ``handle`` a client message, ``encode`` its outputs for the wire."""

    def __init__(self, conductor: Conductor) -> None:
        self.conductor = conductor
        self._seq = 0  # media frames numbered on, across the session's connections
        self._camera: CameraGestures | None = None  # made on the first input.landmarks

    async def handle(self, msg: p.ClientMessage) -> list[p.ServerMessage]:
        """A client message after ``session.start``; the answers to send (``ProtocolError`` if bad)."""
        core, ref = self.conductor, msg.ref
        if isinstance(msg, CLIENT_VOICE_MESSAGES):
            return await handle_voice(voice_of(core.player), core.bus, core.stamper, msg)
        if isinstance(msg, p.InputLandmarks):
            self._camera = self._camera or CameraGestures(core.stamper)
            return await handle_camera(self._camera, core, msg)
        try:
            match msg:
                case p.Ping():
                    return [p.Pong(ref=ref)]
                case p.InputText(text=text):
                    return [await self._publish(core.stamper(TextInput, text=text), ref)]
                case p.InputGesture():
                    try:
                        event = client_gesture(core.stamper, msg.gesture, msg.confidence, msg.x, msg.y)
                    except BadInput as exc:
                        raise p.ProtocolError(p.ErrorCode.BAD_FIELD, str(exc), ref) from None
                    return [await self._publish(event, ref)]
                case p.InputTranscript(text=text, final=final):
                    return [
                        await self._publish(
                            core.stamper(Transcript, text=text, final=final, source="client"), ref
                        )
                    ]
                case p.ResponseInterrupt():
                    interrupt = await core.interrupt()
                    return [p.InputAccepted(event_id=interrupt.id, kind="interrupt", ref=ref)]
                case p.PlanRun(plan=plan):
                    return [p.InputAccepted(event_id=await core.run_plan(plan), kind="plan", ref=ref)]
                case p.StoryChoose(choice=choice):
                    return [p.InputAccepted(event_id=await core.story_choose(choice), kind="story", ref=ref)]
                case p.StoryIntervene(text=text):
                    return [p.InputAccepted(event_id=await core.story_intervene(text), kind="story", ref=ref)]
                case p.StoryRewind(checkpoint=checkpoint):
                    event_id = await core.story_rewind(checkpoint)
                    return [p.InputAccepted(event_id=event_id, kind="story", ref=ref)]
                case p.SessionStart():
                    raise p.ProtocolError(p.ErrorCode.BAD_FIELD, "the session has already started", ref)
        except Refused as exc:
            raise p.ProtocolError(p.ErrorCode.BAD_FIELD, str(exc), ref) from None
        raise p.ProtocolError(p.ErrorCode.UNKNOWN_TYPE, f"unknown message type {type(msg).__name__}", ref)

    def reconnected(self) -> None:
        """A client resumed the session: its camera's frames run on a new clock (a new page's)."""
        self._camera = None

    def voice_in(self, frame: bytes) -> None:
        """A binary ``0x04`` frame: the character's voice from the client (``ProtocolError`` if bad)."""
        voice_of(self.conductor.player).feed(frame)

    async def _publish(self, event: Event, ref: str | None) -> p.InputAccepted:
        await self.conductor.publish(event)
        return p.InputAccepted(event_id=event.id, kind=_kind_of(event), ref=ref)

    def encode(self, item: Output) -> bytes | str:
        """One output as what goes on the wire."""
        match item:
            case VideoOut():
                header = p.VideoHeader(
                    seq=self._next_seq(),
                    chunk=item.chunk,
                    frame=item.frame,
                    pts_ms=item.pts_ms,
                    width=item.width,
                    height=item.height,
                    reflects=list(item.reflects),
                    gen_chunk=item.gen_chunk,
                    sent_ms=round(item.sent_ms, 1),
                )
                return p.encode_media(p.Kind.VIDEO, header, item.jpeg)
            case AudioOut():
                audio = p.AudioHeader(seq=self._next_seq(), pts_ms=item.pts_ms, samples=item.samples)
                return p.encode_media(p.Kind.AUDIO_OUT, audio, item.pcm)
        return p.encode_server(to_message(item))

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq


def to_message(item: Output) -> p.ServerMessage:
    """The protocol message for a notice the session gives its client."""
    match item:
        case StoryMoved(view=view, approximate=approximate):
            return p.StoryState(
                node=view.node,
                choices=msgspec.to_builtins(view.choices),
                checkpoint=view.checkpoint,
                history=msgspec.to_builtins(view.history),
                variables=msgspec.to_builtins(view.variables),
                ending=view.ending,
                approximate=approximate,
            )
        case SceneChanged():
            return p.SceneChanged(chunk=item.chunk, pts_ms=item.pts_ms, scene=dict(item.scene))
        case WorkerMoved():
            return p.GeneratorMoved(gen_chunk=item.gen_chunk, frozen_ms=item.frozen_ms, exact=item.exact)
        case Unshown():
            return p.InputOutcome(event_id=item.event_id, shown=False, reason=item.reason, detail=item.detail)
        case Figures():
            return p.Metrics(
                fps=item.fps,
                on_time=item.on_time,
                reaction_ms_p50=item.reaction_ms_p50,
                reaction_ms_p95=item.reaction_ms_p95,
                queue=item.queue,
            )
        case SpeechStarted():
            return p.InputSpeechStarted(event_id=item.id, audio_ms=item.audio_ms)
        case SpeechStopped():
            return p.InputSpeechStopped(event_id=item.id, audio_ms=item.audio_ms)
        case SoundOnset():
            return p.InputSound(event_id=item.id, label="onset", score=1.0, audio_ms=item.audio_ms)
        case SoundClass():
            return p.InputSound(event_id=item.id, label=item.label, score=item.score, audio_ms=item.audio_ms)
        case Transcript():
            return p.InputTranscriptOut(event_id=item.id, text=item.text, final=item.final)
        case CharacterSpeech():
            return p.CharacterSpeech(text=item.text, state=item.state, heard_text=item.heard_text)
        case DirectorPlan():
            return p.DirectorPlan(plan_id=item.plan_id, epoch=item.epoch, summary=item.summary)
        case DirectorError():
            return p.Error(code="director", message=item.message, fatal=False)
    raise TypeError(f"no protocol message for {type(item).__name__}")


def _kind_of(event: Event) -> str:
    return {
        TextInput: "text",
        Gesture: "gesture",
        Transcript: "transcript",
        Interrupt: "interrupt",
    }.get(type(event), str(type(event).__struct_config__.tag))
