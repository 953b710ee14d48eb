"""The character's voice from the client: speech that the client's own voice pipeline synthesised (the TTS
of a Pipecat pipeline or a LiveKit agent), played as the character's voice so that the mouth follows it.

A client opens a segment (``voice.start``), sends its audio as binary kind 0x04 frames (PCM16 LE mono at
the session's ``audio_out_rate``, so the voice comes back in the audio-out slices sample for sample), and
closes it (``voice.end``). Segments play one after another, each announced by ``voice.started`` and ended
by ``voice.ended``.

Where it enters: the conductor asks its speech player for each chunk's mouth envelope when it decides the
chunk (about one chunk before sending it) and for each frame's audio slice as it sends the frame.
``CharacterVoice`` is that player: the server's own voice (``SpeechPlayer``) plus the client's. A chunk's
client audio is taken from what has arrived when the chunk is decided, so a frame's mouth and the audio
sent with it are the same samples: a client that falls behind gets a silent frame (mouth closed), never a
mouth out of step. A segment starts once a chunk of its audio, or all of it, is here.

An interrupt (``response.interrupt``, a story rewind) cuts the client's voice at the next frame, as it
cuts the server's; audio that still arrives for the segment it cut is dropped. The user speaking does not
cut it: the client's pipeline decides its own barge-in and says so with ``response.interrupt``.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from agent.realizer import Realizer
from events.bus import EventBus
from events.stamp import Stamper
from events.tracing import Tracer
from events.vocabulary import SpeechStarted, SpeechStopped
from server import protocol as p
from server.speech import SpeechConfig, SpeechPlayer
from server.voice import Utterance, Voice

MAX_AHEAD_S = 30.0
"""How much voice audio a client may send ahead of playback; beyond it, frames are refused."""

Notify = Callable[[p.ServerMessage], None]
"""Queues a message for the session's client (set by the server when the session goes live)."""


@dataclass
class _Segment:
    id: str
    parts: deque[np.ndarray] = field(default_factory=deque)
    buffered: int = 0  # samples received and not yet played
    ended: bool = False  # voice.end came: no more audio
    start_frame: int | None = None

    def read(self, n: int) -> np.ndarray:
        """The next ``n`` samples (fewer only at the end)."""
        out: list[np.ndarray] = []
        need = n
        while need and self.parts:
            head = self.parts[0]
            out.append(head[:need])
            if head.size <= need:
                self.parts.popleft()
            else:
                self.parts[0] = head[need:]
            need -= out[-1].size
        self.buffered -= n - need
        return np.concatenate(out) if out else np.zeros(0, dtype=np.float32)


@dataclass
class _Planned:
    """One chunk's client voice, decided with the chunk: each frame's samples and segment (None: none)."""

    samples: np.ndarray  # (frames, samples a frame) float32
    owner: list[str | None]
    last: list[bool]  # the frame is its segment's last


class CharacterVoice(SpeechPlayer):
    """The session's speech player: the server's own voice and the client's (which sounds over it)."""

    def __init__(
        self,
        voice: Voice,
        realizer: Realizer,
        tracer: Tracer | None = None,
        config: SpeechConfig | None = None,
    ) -> None:
        super().__init__(voice, realizer, tracer, config)
        self.notify: Notify = lambda message: None
        self._queue: deque[_Segment] = deque()  # the open or playing segment first
        self._open: _Segment | None = None  # the segment 0x04 frames go to
        self._cut: str | None = None  # the open segment an interrupt cut: its late audio is dropped
        self._planned: dict[int, _Planned] = {}
        self._frame = -1  # the last frame sliced (sent)
        self._speech_from: float | None = None  # when the user began speaking (input.speech), in ms

    # --------------------------------------------------------------------------- the client's messages

    def begin(self, segment: str) -> None:
        """``voice.start``: a new segment (one still open ends here: it has all its audio)."""
        self.end()
        self._open = _Segment(segment)
        self._cut = None
        self._queue.append(self._open)

    def end(self) -> str | None:
        """``voice.end``: the open segment has all its audio; its id (or the id of the one an interrupt cut),
        None when no segment was open."""
        closed = self._cut
        if self._open is not None:
            self._open.ended = True
            closed, self._open = self._open.id, None
        self._cut = None
        return closed

    def feed(self, frame: bytes) -> None:
        """One binary kind 0x04 frame; ``ProtocolError`` when it cannot be taken."""
        pcm = p.decode_voice_in(frame, self.voice.rate)
        if self._open is None:
            if self._cut is not None:
                return  # the tail of a segment that was interrupted, already in flight
            raise p.ProtocolError(
                p.ErrorCode.BAD_FIELD, "voice audio outside a segment: send voice.start first"
            )
        if sum(s.buffered for s in self._queue) + len(pcm) // 2 > MAX_AHEAD_S * self.voice.rate:
            raise p.ProtocolError(
                p.ErrorCode.RATE_LIMITED,
                f"voice audio more than {MAX_AHEAD_S:.0f} s ahead of playback; dropped",
            )
        samples = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
        self._open.parts.append(samples)
        self._open.buffered += samples.size

    def user_speech(self, stamper: Stamper, state: str) -> SpeechStarted | SpeechStopped:
        """``input.speech``: the event the server's own VAD would have published, placed on the media clock
        (``audio_ms`` is the presentation time of the next frame to be sent)."""
        now_ms = self.clock.pts_ms(self._frame + 1)
        if state == "started":
            self._speech_from = now_ms
            return stamper(SpeechStarted, audio_ms=now_ms)
        began, self._speech_from = self._speech_from, None
        return stamper(
            SpeechStopped, audio_ms=now_ms, duration_ms=now_ms - (now_ms if began is None else began)
        )

    # --------------------------------------------------------------------------- what the conductor calls

    async def envelope(self, chunk: int, late: asyncio.Event | None = None) -> tuple[float, ...] | None:
        plan = self._plan(chunk)
        if not any(plan.owner):
            return await super().envelope(chunk, late)
        env = Utterance("", plan.samples.reshape(-1), self.voice.rate, ()).frame_envelope(self.clock.fps)
        return tuple(float(e) if owner else 0.0 for e, owner in zip(env, plan.owner, strict=True))

    def sounding(self, chunk: int) -> bool:
        plan = self._planned.get(chunk)
        return (plan is not None and any(plan.owner)) or super().sounding(chunk)

    def slice(self, frame: int) -> np.ndarray:
        out = super().slice(frame)
        self._frame = frame
        chunk, i = divmod(frame, self.clock.chunk_frames)
        for old in [k for k in self._planned if k < chunk]:
            del self._planned[old]
        plan = self._planned.get(chunk)
        owner = plan.owner[i] if plan is not None else None
        if plan is None or owner is None:
            return out
        if plan.last[i]:
            self.notify(p.VoiceEnded(segment=owner, pts_ms=self.clock.pts_ms(frame + 1), interrupted=False))
        return plan.samples[i].copy()

    def interrupt(self, frame: int, speech_id: str | None = None) -> str | None:
        heard = super().interrupt(frame, speech_id)
        if speech_id is None:
            self._cut_client(frame)
        return heard

    # --------------------------------------------------------------------------- inside

    def _plan(self, chunk: int) -> _Planned:
        """Chunk ``chunk``'s client voice, taken from what has arrived the first time it is asked for."""
        if (plan := self._planned.get(chunk)) is not None:
            return plan
        n, per = self.clock.chunk_frames, self.per_frame
        plan = _Planned(np.zeros((n, per), dtype=np.float32), [None] * n, [False] * n)
        first = self.clock.first_frame(chunk)
        for i in range(n):
            segment = self._queue[0] if self._queue else None
            if segment is None:
                break
            if segment.start_frame is None:
                if not (segment.ended or segment.buffered >= n * per):
                    break  # a segment starts once a chunk of it (or all of it) is here
                segment.start_frame = first + i
                super().interrupt(first + i)  # one voice at a time: the client's cuts the server's
                self.notify(p.VoiceStarted(segment=segment.id, pts_ms=self.clock.pts_ms(first + i)))
            if segment.buffered >= per or segment.ended:
                samples = segment.read(per)
                plan.samples[i, : samples.size] = samples
            # else the client is behind: a silent frame of the segment, its audio goes on in the next one
            plan.owner[i] = segment.id
            if segment.ended and segment.buffered == 0:
                plan.last[i] = True
                self._queue.popleft()
        self._planned[chunk] = plan
        return plan

    def _cut_client(self, frame: int) -> None:
        """Cut the client's voice from global frame ``frame`` on: planned frames go silent, queued segments
        are dropped, and each segment that had not finished gets ``voice.ended`` (interrupted)."""
        cut: list[str] = []
        for chunk, plan in self._planned.items():
            for i, owner in enumerate(plan.owner):
                if owner is not None and self.clock.first_frame(chunk) + i >= frame:
                    if owner not in cut:
                        cut.append(owner)
                    plan.owner[i], plan.last[i] = None, False
                    plan.samples[i] = 0.0
        for segment in self._queue:
            if segment.id not in cut:
                cut.append(segment.id)
        self._queue.clear()
        if self._open is not None:
            self._cut, self._open = self._open.id, None
        for segment_id in cut:
            self.notify(p.VoiceEnded(segment=segment_id, pts_ms=self.clock.pts_ms(frame), interrupted=True))


def voice_of(player: SpeechPlayer) -> CharacterVoice:
    """The session's player as one that takes the client's voice (``ProtocolError`` if it does not)."""
    if not isinstance(player, CharacterVoice):
        raise p.ProtocolError(p.ErrorCode.BAD_FIELD, "this session does not take the character's voice")
    return player


CLIENT_VOICE_MESSAGES = (p.VoiceStart, p.VoiceEnd, p.InputSpeech)
"""The client messages of a client's own voice pipeline, which ``handle`` answers."""


async def handle(
    voice: CharacterVoice, bus: EventBus, stamper: Stamper, msg: p.ClientMessage
) -> list[p.ServerMessage]:
    """Act on one of ``CLIENT_VOICE_MESSAGES``; returns the answers to send."""
    match msg:
        case p.VoiceStart():
            segment = stamper.next_id()
            voice.begin(segment)
            return [p.InputAccepted(event_id=segment, kind="voice", ref=msg.ref)]
        case p.VoiceEnd():
            # Answered like every input: which segment it closed, or why there was none.
            if (closed := voice.end()) is None:
                raise p.ProtocolError(p.ErrorCode.BAD_FIELD, "voice.end: no voice segment is open", msg.ref)
            return [p.InputAccepted(event_id=closed, kind="voice", ref=msg.ref)]
        case p.InputSpeech(state=state):
            event = voice.user_speech(stamper, state)
            await bus.publish(event)
            return [p.InputAccepted(event_id=event.id, kind="speech", ref=msg.ref)]
    raise TypeError(f"not a client voice message: {type(msg).__name__}")
