"""An onstage video service for Pipecat (``onstage[pipecat]``): place it right after the pipeline's TTS.

    transport.input() -> stt -> user aggregator -> llm -> tts -> OnstageVideoService -> transport.output()

It sends the TTS audio to an onstage session as the character's voice (so the mouth follows whatever TTS
the pipeline uses) and swallows it; what comes downstream instead is the session's picture and voice, in
step: per video frame an ``OutputImageRawFrame`` (``sync_with_audio``), preceded while the character
speaks by that frame's audio as a ``TTSAudioRawFrame`` at the session's ``audio_out_rate`` (a frame is a
whole number of samples). Video flows from the start whether or not anyone speaks, and no silent audio is
emitted as speech: idle frames carry no audio. ``TTSStoppedFrame`` goes downstream after the last audio
of its segment.

Also: ``InterruptionFrame`` -> ``response.interrupt`` (and nothing of the cut speech comes downstream
after it), ``UserStartedSpeakingFrame`` / ``UserStoppedSpeakingFrame`` -> ``input.speech`` (the character
listens), ``CharacterFrame`` -> a behavior (emotion, action, gaze), and ``tools()``: LLM function tools
for the same, generated from the session's vocabulary.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pipecat.adapters.llm.schemas.function_schema import FunctionSchema
from pipecat.frames.frames import (
    CancelFrame,
    ControlFrame,
    EndFrame,
    Frame,
    InterruptionFrame,
    OutputImageRawFrame,
    StartFrame,
    TTSAudioRawFrame,
    TTSStartedFrame,
    TTSStoppedFrame,
    UserStartedSpeakingFrame,
    UserStoppedSpeakingFrame,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.services.llm_service import FunctionCallParams

from integrations.character import DEFAULT_PLAN, behavior_for, character_tools, plan_with
from integrations.session import Beat, OnstageSession, SegmentEnd

END_WAIT_S = 30.0
"""On ``EndFrame``, the voice still to play gets this long to finish before the session closes."""


@dataclass
class CharacterFrame(ControlFrame):
    """Ask the character for a behavior now (docs/plans.md): ``{"kind": "emotion", "emotion": "happy"}``,
    ``{"kind": "action", "name": "wave"}``, ``{"kind": "gaze", "x": -0.5, "y": 0.0}``."""

    behavior: dict[str, Any] = field(default_factory=dict)


class OnstageVideoService(FrameProcessor):
    """The character of an onstage session as the pipeline's video and voice (see the module's docstring).

    ``url``: the session endpoint (``ws://HOST:PORT/v1/session``); ``start``: fields of ``session.start``
    (the default runs no Director and a plan of idle variety only: the pipeline's LLM does the talking).
    """

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        start: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._start_fields = {"director": "none", "plan": DEFAULT_PLAN, **(start or {})}
        self._url, self._token = url, token
        self.session: OnstageSession | None = None
        """The session, once the pipeline has started (kept after it ended, for what it recorded)."""
        self._closed = False
        self._forward: asyncio.Task[None] | None = None
        self._stops: dict[int, TTSStoppedFrame] = {}  # held until their segment's last audio is out
        self._muted = False  # after an interruption, until the next TTS segment starts

    @property
    def base_plan(self) -> dict[str, Any]:
        plan = self._start_fields.get("plan")
        return plan if isinstance(plan, dict) else DEFAULT_PLAN

    def tools(self) -> list[FunctionSchema]:
        """LLM function tools for the character's emotion, actions and gaze (after the pipeline started),
        each with its handler: list them in the LLM context's ``ToolsSchema``."""
        if self.session is None or self.session.started is None:
            raise RuntimeError("the tools come from the session: list them once the pipeline has started")
        return [
            FunctionSchema(spec.name, spec.description, spec.properties, spec.required, handler=self._on_tool)
            for spec in character_tools(self.session.started)
        ]

    async def perform(self, behavior: dict[str, Any]) -> None:
        """Play one behavior now (what ``CharacterFrame`` and the tools do)."""
        await self._live().run_plan(plan_with(self.base_plan, [behavior]))

    # --------------------------------------------------------------------------- frames

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, StartFrame):
            await self.push_frame(frame, direction)
            await self._open()
        elif isinstance(frame, EndFrame):
            await self._close(drain=True)
            await self.push_frame(frame, direction)
        elif isinstance(frame, CancelFrame):
            await self._close(drain=False)
            await self.push_frame(frame, direction)
        elif isinstance(frame, TTSStartedFrame):
            self._muted = False
            await self._live().voice_start()
            await self.push_frame(frame, direction)
        elif isinstance(frame, TTSAudioRawFrame):
            await self._voice(frame)
        elif isinstance(frame, TTSStoppedFrame):
            number = await self._live().voice_end()
            if number is None:
                await self.push_frame(frame, direction)
            else:
                self._stops[number] = frame
        elif isinstance(frame, InterruptionFrame):
            self._muted = True
            self._stops.clear()
            await self._live().interrupt()
            await self.push_frame(frame, direction)
        elif isinstance(frame, UserStartedSpeakingFrame | UserStoppedSpeakingFrame):
            await self._live().user_speech(isinstance(frame, UserStartedSpeakingFrame))
            await self.push_frame(frame, direction)
        elif isinstance(frame, CharacterFrame):
            await self.perform(frame.behavior)
        else:
            await self.push_frame(frame, direction)

    async def _voice(self, frame: TTSAudioRawFrame) -> None:
        session = self._live()
        if self._muted:
            return  # the tail of speech that was interrupted
        if session.speaking is None:
            await session.voice_start()  # a TTS that sends audio without TTSStartedFrame
        await session.voice_audio(_mono(frame), frame.sample_rate)

    # --------------------------------------------------------------------------- the session

    def _live(self) -> OnstageSession:
        if self.session is None or self._closed:
            raise RuntimeError("the onstage session is not open: the pipeline has not started")
        return self.session

    async def _open(self) -> None:
        self.session = OnstageSession(self._url, token=self._token, start=self._start_fields)
        await self.session.open()
        self._forward = self.create_task(self._forward_beats(self.session), name="onstage-beats")

    async def _close(self, drain: bool) -> None:
        session = self.session
        if session is None or self._closed:
            return
        self._closed = True
        if drain:
            await session.voice_end()
            try:
                await session.drain(END_WAIT_S)
            except TimeoutError:
                pass  # the voice that did not play in time is cut with the session
        if self._forward is not None:
            await self.cancel_task(self._forward)
            self._forward = None
        await session.close()

    async def _forward_beats(self, session: OnstageSession) -> None:
        assert session.started is not None
        size = (session.started.width, session.started.height)
        async for item in session.beats():
            if isinstance(item, SegmentEnd):
                stop = self._stops.pop(item.segment, None)
                if stop is not None:
                    await self.push_frame(stop)
                continue
            await self._push_beat(item, size, session.rate)

    async def _push_beat(self, beat: Beat, size: tuple[int, int], rate: int) -> None:
        if beat.segment is not None and beat.audio:
            await self.push_frame(TTSAudioRawFrame(audio=beat.audio, sample_rate=rate, num_channels=1))
        rgb = await asyncio.to_thread(beat.rgb)
        image = OutputImageRawFrame(image=rgb.tobytes(), size=size, format="RGB")
        image.sync_with_audio = True
        image.metadata["onstage"] = {"pts_ms": beat.pts_ms, "chunk": beat.chunk, "frame": beat.frame}
        await self.push_frame(image)

    async def _on_tool(self, params: FunctionCallParams) -> None:
        session = self._live()
        assert session.started is not None
        try:
            behavior = behavior_for(session.started, params.function_name, dict(params.arguments))
        except ValueError as exc:
            await params.result_callback({"ok": False, "error": str(exc)})
            return
        await self.perform(behavior)
        await params.result_callback({"ok": True})


def _mono(frame: TTSAudioRawFrame) -> bytes:
    """The frame's audio as mono PCM16 (the first channel of interleaved ones)."""
    if frame.num_channels == 1:
        return frame.audio
    return np.frombuffer(frame.audio, "<i2")[:: frame.num_channels].tobytes()
