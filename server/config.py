"""The server's configuration: a ``[server]`` TOML table, then command-line flags on top."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Annotated

import msgspec

from server.access import Access
from server.cluster.settings import ClusterSettings
from server.limits import Limits
from server.speech import SpeechConfig, VoiceStart
from server.webrtc.settings import RtcSettings
from streaming_model.backend import BatchingChoice


class ServerConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Where the server listens, who may connect, and how much each session may do."""

    host: str = "127.0.0.1"
    port: int = 8765
    token_secret: str | None = None
    """With a secret, clients must present a token (``onstage token``); without one, bind loopback only."""
    character: str = "fox"
    plan: str = "greeter"
    story_db: str = ":memory:"
    """Where story checkpoints live; a file lets a restarted server bring story sessions back."""
    backend: str = "tiny"
    """The video model behind every session (``streaming_model.backends``): tiny or world."""
    backend_options: dict[str, str] = {}
    """Its options, as ``--backend-option NAME=VALUE`` gives them (``fps = "16"``)."""
    batching: BatchingChoice = "exact"
    """How the sessions share the generator (``streaming_model.lanes``): ``exact``, on ``lanes`` threads
    that batch the chunks falling due together where the backend's batches give each session the frames
    it gets alone; ``approximate``, wherever the backend batches (frames may differ in their last bits
    from a lone session's); ``off``, a thread per session, a chunk at a time."""
    lanes: int = 0
    """Generator threads the sessions share when batching (0: one per core)."""
    max_batch: int = 8
    """The most chunks a lane generates in one batch."""
    limits: Limits = msgspec.field(default_factory=Limits)
    access: Access = msgspec.field(default_factory=Access)
    """Host names and page origins accepted beyond loopback's, and live sessions per token."""
    rtc: RtcSettings = msgspec.field(default_factory=RtcSettings)
    """The WebRTC transport beside the WebSocket (``server.webrtc``)."""
    ray: ClusterSettings = msgspec.field(default_factory=ClusterSettings)
    """Generator workers on a Ray cluster (``[server.ray] address = "local"``; ``server.cluster``)."""
    speculative_transcripts: bool = True
    """Start Whisper on a speech segment when its silence begins, not when the VAD confirms the stop."""
    foresee: bool = True
    """In sessions that splice, prepare the splice of a sound onset or a start of speech on its hunch, while
    it is being confirmed, and show it only if it is (``server.core.foresight``)."""
    whisper_window_s: float = 10.0
    """The window short segments are transcribed in (``events.transcriber.WhisperConfig.window_s``)."""
    punctuated_silence_ms: float = 0.0
    """Silence that ends a turn whose last transcript ends a sentence (``events.turn``): 0, at the VAD's
    stop, as soon as that transcript is there."""
    voice_start: VoiceStart = "cue_chunk"
    """Where the character's speech starts (``server.speech``): ``cue_chunk``, with the chunk that cued
    it, or ``next_chunk``, a chunk after it, the same frames for the same seed and inputs either way;
    ``when_ready``, from the first frame not yet sent once its first audio is synthesised (where scripted
    speech starts, and so the frames, then depend on Piper's speed); ``on_time``, as ``cue_chunk`` while
    the audio is ready in time for each chunk, else the voice starts when ready or pauses until it is (no
    chunk late for it)."""
    voice_first_clause: bool = True
    """Synthesise a reply's first clause (up to its first comma) on its own, so its first audio is ready
    sooner (Piper's time grows with the text). The same text is split the same way every time."""
    voice_redirects: bool = True
    """The Director's speech, once its first audio is synthesised, regenerates the chunk in flight or a
    generated chunk not yet sent where that still fits before its send (as a gesture does), instead of
    waiting for the next chunk's decision (``server.speech.SpeechConfig.redirects``). Only the
    Director's: speech from the user, a script or a story lands where it did."""

    loop_stall_report_ms: Annotated[float, msgspec.Meta(ge=0.0)] = 0.0
    """Log where the event loop's thread was whenever the loop is held this long (``server.loop_watch``):
    a diagnosis for late chunks; 0, off. ``onstage_event_loop_lag_seconds`` measures the lag always."""

    def speech(self) -> SpeechConfig:
        """The voice's switches as the session factory takes them."""
        return SpeechConfig(
            start=self.voice_start, first_clause=self.voice_first_clause, redirects=self.voice_redirects
        )


class ConfigFileError(ValueError):
    """A config file that cannot be read or does not fit ``ServerConfig``; the message says where."""


def load_server_config(path: Path | None) -> ServerConfig:
    """The ``[server]`` table of ``path`` (defaults for anything it leaves out; all defaults without a file)."""
    if path is None:
        return ServerConfig()
    try:
        table = tomllib.loads(path.read_text()).get("server", {})
        return msgspec.convert(table, ServerConfig)
    except (OSError, tomllib.TOMLDecodeError, msgspec.ValidationError) as exc:
        raise ConfigFileError(f"{path}: {exc}") from None
