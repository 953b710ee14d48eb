"""Speech started / stopped from silero-vad, over streaming 16 kHz audio of any frame size.

The model is silero-vad's ONNX export, bundled in the ``silero-vad`` wheel, run with onnxruntime on one
thread (about 0.1 ms per 32 ms window here, against 0.4 ms for the TorchScript model). Frames of any size
are cut into the model's 512-sample windows exactly as silero's own ``OnnxWrapper`` does: each window is
preceded by the last 64 samples of the one before (its context) and the recurrent state is carried from
window to window, so the probabilities do not depend on how the stream was split into frames.

Segmentation follows silero's ``VADIterator`` and ``get_speech_timestamps``, made causal:

- a window with probability >= ``threshold`` is speech; one below ``neg_threshold`` is silence; in between
  nothing changes (hysteresis);
- a segment is confirmed once it has lasted ``min_speech_ms`` with no window below ``neg_threshold`` (one
  such window before confirmation drops it: its evidence must be continuous) and the confirming window
  carries a voice's pitch (``confirm_pitch``), or once ``unpitched_confirm_ms`` of windows in a row were all
  at or above ``threshold``; only then is ``SpeechStarted`` sent (late by that much, but placed at the
  first voiced window, minus the padding). The pitch is what tells a vowel from a bell's ring or a burst
  of applause that the model scores as speech (docs/hearing.md has the figures); and the model, run again
  from a fresh state over the last second (``recheck_ms``), must still hear speech in the segment: its
  state, still holding the last speaker, is what makes it score a doorbell or a bark as speech;
- a segment ends once silence has lasted ``min_silence_ms``; ``SpeechStopped`` is placed at the start of
  the first silent window plus the padding. A segment that ends before it was confirmed sends nothing.
- inside a confirmed segment, the first silent window after speech gives a ``SilenceBegan`` hint at once
  (the ears' listeners see it, the bus does not): the stop it may lead to, ``min_silence_ms`` later,
  carries the same ``heard_ms``, so a transcriber can start on the audio heard so far and know at the stop
  whether its work stands.

The model places speech on a 32 ms grid and its probability lags: it rises on the first vowel (after an
``s`` or a ``p``) and stays high for about 100 ms after the voice stops, longer in noise. So each boundary
is then refined on the signal itself: within ``edge_search_ms`` of where the model put it, the edge moves
to where 10 ms frames stop (or start) being louder than the background next to them by ``edge_margin_db``.
The background is measured on the audio the model called silence. Padding is added after refinement.
"""

from __future__ import annotations

import functools
import importlib.util
import time
from pathlib import Path

import msgspec
import numpy as np
import onnxruntime

from events.audio import SAMPLE_RATE
from events.hunch import Hunch
from events.levels import PitchTracker
from events.stamp import Stamper
from events.vocabulary import Event, SilenceBegan, SpeechStarted, SpeechStopped

WINDOW = 512  # samples per model call at 16 kHz (32 ms): the only size the model takes
CONTEXT = 64  # samples of the previous window the model sees before each window
FRAME = 160  # 10 ms: the grid on which boundaries are refined (aligned to absolute stream positions)
EDGE_FLOOR_DB = -60.0  # a refined edge never follows audio quieter than this (dBFS), even in digital silence
EDGE_GAP = 8  # frames: quieter gaps up to 80 ms (a stop consonant's closure) stay inside the speech
PITCH_WINDOW = 640  # 40 ms: two periods of the lowest pitch looked for


class VadConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Thresholds and durations of speech detection (silero's names, in milliseconds)."""

    threshold: float = 0.5
    """Speech probability at or above which a window counts as speech."""
    neg_threshold: float | None = None
    """Probability below which a window counts as silence; None means ``threshold - 0.15`` (silero's)."""
    min_speech_ms: float = 64.0
    """Speech must last this long before ``SpeechStarted`` is sent: knocks, clicks and coughs are shorter."""
    confirm_pitch: bool = True
    """Whether the window that confirms a start must end in a pitch (a voice), else a later one confirms."""
    pitch_min_hz: float = 60.0
    pitch_max_hz: float = 500.0
    pitch_clarity: float = 0.6
    """How periodic (the NSDF peak, 0..1, as in ``events.levels``) a voiced window must be."""
    recheck_ms: float = 1000.0
    """A start that a pitch would confirm is first scored again by the model from a fresh state over this
    much of the stream before it: one of the segment's windows must reach ``threshold`` there too. The
    model's state carries the last speaker for seconds, and with it scores a sound after speech (a
    doorbell, a bark) as speech; from a fresh state it mostly does not, while a voice does. A start the
    recheck refuses is tried again at the next window. 0 turns this off."""
    unpitched_confirm_ms: float = 320.0
    """Windows all at or above ``threshold`` for this long confirm a start without a pitch (whispers);
    0 turns this off."""
    min_silence_ms: float = 300.0
    """Silence must last this long before ``SpeechStopped``: shorter pauses stay inside the segment."""
    speech_pad_ms: float = 30.0
    """Each segment is widened by this much on both sides (never over its neighbour or the stream's ends)."""
    edge_search_ms: float = 250.0
    """How far the signal may move a boundary from where the model put it; 0 keeps the model's grid."""
    edge_margin_db: float = 9.0
    """How much louder than the background a 10 ms frame must be to count as part of the speech."""

    def __post_init__(self) -> None:
        if not 0.0 < self.threshold < 1.0:
            raise ValueError(f"threshold must be in (0, 1), got {self.threshold}")
        if not 0.0 < self.stop_threshold <= self.threshold:
            raise ValueError(f"neg_threshold must be in (0, threshold], got {self.neg_threshold}")
        for name in (
            "min_speech_ms",
            "min_silence_ms",
            "speech_pad_ms",
            "edge_search_ms",
            "edge_margin_db",
            "unpitched_confirm_ms",
            "recheck_ms",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative, got {getattr(self, name)}")

    @property
    def stop_threshold(self) -> float:
        """The probability below which a window is silence."""
        return self.threshold - 0.15 if self.neg_threshold is None else self.neg_threshold


def _model_path() -> Path:
    # Found without importing silero_vad: its __init__ imports torch and sets torch's threads to 1 for the
    # whole process, which is not ours to decide.
    spec = importlib.util.find_spec("silero_vad")
    if spec is None or spec.origin is None:
        raise ImportError("silero-vad is not installed (it ships the VAD model)")
    return Path(spec.origin).parent / "data" / "silero_vad.onnx"


@functools.cache
def _session() -> onnxruntime.InferenceSession:
    # One session serves every detector: the recurrent state is passed in and out explicitly, and
    # onnxruntime's run() is thread-safe. One thread each: a 32 ms window is too small to split.
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return onnxruntime.InferenceSession(
        str(_model_path()), sess_options=options, providers=["CPUExecutionProvider"]
    )


def _samples(ms: float) -> int:
    return round(ms * SAMPLE_RATE / 1000)


def _ms(sample: int) -> float:
    return sample * 1000.0 / SAMPLE_RATE


class _Recent:
    """The last ``size`` samples of the stream, addressed by absolute position (a ring buffer)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._ring = np.zeros(size, dtype=np.float32)
        self.end = 0  # absolute position just after the newest sample

    def push(self, samples: np.ndarray) -> None:
        n = samples.size
        tail = samples[-self.size :]
        at = (self.end + n - tail.size) % self.size
        first = min(tail.size, self.size - at)
        self._ring[at : at + first] = tail[:first]
        self._ring[: tail.size - first] = tail[first:]
        self.end += n

    def get(self, start: int, stop: int) -> np.ndarray:
        """Samples ``[start, stop)``; the range must lie within the last ``size`` samples."""
        idx = np.arange(start, stop) % self.size
        return self._ring[idx]


class VoiceDetector:
    """Streaming speech detector: ``feed`` any number of samples, get ``SpeechStarted`` / ``SpeechStopped``.

    Positions are counted in samples from the first sample fed (exact over any stream length); ``flush``
    ends an open segment at the end of what was fed and starts a fresh model state, positions continuing.
    """

    def __init__(self, stamp: Stamper, config: VadConfig | None = None) -> None:
        self.config = config if config is not None else VadConfig()
        self._stamp = stamp
        self._session = _session()
        self._sr = np.array(SAMPLE_RATE, dtype=np.int64)
        self._min_speech = _samples(self.config.min_speech_ms)
        self._unpitched = _samples(self.config.unpitched_confirm_ms)
        self._pitch = PitchTracker(
            PITCH_WINDOW, self.config.pitch_min_hz, self.config.pitch_max_hz, self.config.pitch_clarity
        )
        self._min_silence = _samples(self.config.min_silence_ms)
        self._pad = _samples(self.config.speech_pad_ms)
        self._search = _samples(self.config.edge_search_ms) // FRAME * FRAME
        # Refinement looks back from the newest window over the search span plus the silence (or the speech)
        # that had to pass before the boundary was decided.
        self._recheck = _samples(self.config.recheck_ms)
        span = self._search + max(self._min_silence, self._min_speech, self._recheck) + 3 * WINDOW
        self._recent = _Recent(1 << (span - 1).bit_length())
        # The model's input: 64 samples of context followed by the window being filled.
        self._input = np.zeros((1, CONTEXT + WINDOW), dtype=np.float32)
        self._filled = 0
        self._state = np.zeros((2, 1, 128), dtype=np.float32)
        self._window_start = 0  # stream position of the window being filled
        self._segment_start: int | None = None  # start of the open segment (voiced window, then refined)
        self._confirmed = False  # whether SpeechStarted was sent for the open segment
        self._hunches: list[Hunch] = []
        self._loud_since: int | None = None  # start of the run of windows at or above threshold, if any
        self._silence_start: int | None = None  # first silent window inside the open segment, if any
        self._last_end = 0  # where the previous segment ended (padding never crosses it)
        self.probability = 0.0
        """Speech probability of the last complete window."""

    @property
    def speaking(self) -> bool:
        """Whether a confirmed speech segment is open."""
        return self._confirmed

    @property
    def position(self) -> int:
        """Samples fed so far."""
        return self._window_start + self._filled

    def feed(self, samples: np.ndarray) -> list[Event]:
        """Take the next samples (float32, 16 kHz mono) and return the events they complete."""
        events: list[Event] = []
        i, n = 0, samples.size
        while i < n:
            take = min(WINDOW - self._filled, n - i)
            # Kept window by window, so that refinement sees the stream as it was when it decides.
            self._recent.push(samples[i : i + take])
            self._input[0, CONTEXT + self._filled : CONTEXT + self._filled + take] = samples[i : i + take]
            self._filled += take
            i += take
            if self._filled == WINDOW:
                self._step(events)
        return events

    def _step(self, events: list[Event]) -> None:
        out, self._state = self._session.run(
            None, {"input": self._input, "state": self._state, "sr": self._sr}
        )
        self.probability = p = float(out[0, 0])
        start, end = self._window_start, self._window_start + WINDOW
        self._input[0, :CONTEXT] = self._input[0, -CONTEXT:]
        self._filled = 0
        self._window_start = end
        cfg = self.config
        self._loud_since = (
            (start if self._loud_since is None else self._loud_since) if p >= cfg.threshold else None
        )
        if self._segment_start is None:
            if p < cfg.threshold:
                return
            self._segment_start = start
            self._hunches.append(self._hunch(start))
        if not self._confirmed:
            self._step_unconfirmed(p, end, events)
        elif p >= cfg.threshold:
            self._silence_start = None
        elif p < cfg.stop_threshold:
            if self._silence_start is None:
                self._silence_start = start
                events.append(self._silence_began(end))
            if end - self._silence_start >= self._min_silence:
                self._close(self._silence_start, events, heard=self._silence_start + WINDOW)

    def _step_unconfirmed(self, p: float, end: int, events: list[Event]) -> None:
        """Confirm the open segment at the window ending at ``end``, or drop it, or wait."""
        assert self._segment_start is not None
        if p < self.config.stop_threshold:
            # Before it is confirmed a segment must be heard without a break: two voiced windows with silence
            # between them (a drum beat, then another) are not one utterance.
            self._close(self._segment_start, events, heard=end)
            return
        if end - self._segment_start < self._min_speech:
            return
        loud = self._loud_since is not None and self._unpitched and end - self._loud_since >= self._unpitched
        if not (loud or (self._pitched(end) and self._rechecked(end))):
            return
        self._confirmed = True
        at = max(self._refine_start(self._segment_start) - self._pad, self._last_end, 0)
        self._segment_start = at
        events.append(self._stamp(SpeechStarted, audio_ms=_ms(at)))

    def _pitched(self, end: int) -> bool:
        """Whether the 40 ms before ``end`` sound like a voice: a clear pitch within the configured range.

        Checked only on a window that could confirm a start, so it costs nothing while nobody speaks."""
        if not self.config.confirm_pitch:
            return True
        if end - PITCH_WINDOW < self.position - self._recent.size:
            return False
        return self._pitch(self._recent.get(end - PITCH_WINDOW, end)) is not None

    def _rechecked(self, end: int) -> bool:
        """Whether the model, run from a fresh state over the ``recheck_ms`` before ``end``, scores one of the
        open segment's windows at ``threshold`` or more (``VadConfig.recheck_ms``)."""
        assert self._segment_start is not None
        if not self._recheck:
            return True
        first = max(end - self._recheck, self.position - self._recent.size, 0)
        first = end - (end - first) // WINDOW * WINDOW  # on the stream's window grid
        state = np.zeros_like(self._state)
        x = np.zeros((1, CONTEXT + WINDOW), dtype=np.float32)
        best = 0.0
        for start in range(first, end, WINDOW):
            x[0, CONTEXT:] = self._recent.get(start, start + WINDOW)
            out, state = self._session.run(None, {"input": x, "state": state, "sr": self._sr})
            x[0, :CONTEXT] = x[0, -CONTEXT:]
            if start >= self._segment_start:
                best = max(best, float(out[0, 0]))
        return best >= self.config.threshold

    def _silence_began(self, heard: int) -> SilenceBegan:
        assert self._segment_start is not None
        return SilenceBegan(
            id="",
            session=self._stamp.session,
            t_ns=time.monotonic_ns(),
            start_ms=_ms(self._segment_start),
            heard_ms=_ms(heard),
        )

    def _close(self, silence_start: int, events: list[Event], heard: int) -> None:
        """End the open segment where the model heard silence from; report it if it was confirmed.

        ``heard`` is the end of the audio heard when that silence began (the stream's end without one)."""
        assert self._segment_start is not None
        if not self._confirmed:
            self._hunches.append(self._hunch(self._segment_start, dropped=True))
        else:
            end = self._refine_end(silence_start)
            at = max(min(end + self._pad, self.position), self._segment_start)
            duration = _ms(at - self._segment_start)
            events.append(
                self._stamp(SpeechStopped, audio_ms=_ms(at), duration_ms=duration, heard_ms=_ms(heard))
            )
            self._last_end = at
        self._segment_start = None
        self._silence_start = None
        self._confirmed = False

    def take_hunches(self) -> list[Hunch]:
        """The hunches told since the last call (``events.hunch``): a segment as it opens, and again,
        dropped, where it closes unconfirmed."""
        hunches, self._hunches = self._hunches, []
        return hunches

    def _hunch(self, start: int, dropped: bool = False) -> Hunch:
        # Told as its first window ends; confirmed with the window that completes min_speech_ms at the soonest.
        soonest = _ms(max(-(-self._min_speech // WINDOW) - 1, 0) * WINDOW)
        return Hunch(kind="speech.started", audio_ms=_ms(start), confirm_ms=soonest, dropped=dropped)

    def _frames_db(self, start: int, stop: int) -> tuple[int, np.ndarray]:
        """Loudness (dB) of the 10 ms frames within ``[start, stop)``, and where the first one starts."""
        start = -(-max(start, self.position - self._recent.size) // FRAME) * FRAME
        stop = max(start, stop // FRAME * FRAME)
        x = self._recent.get(start, stop).reshape(-1, FRAME)
        return start, 10.0 * np.log10(np.mean(x * x, axis=1, dtype=np.float64) + 1e-12)

    def _threshold(self, background: np.ndarray) -> float:
        return max(float(np.percentile(background, 20)) + self.config.edge_margin_db, EDGE_FLOOR_DB)

    def _refine_start(self, voiced: int) -> int:
        """Where speech whose first voiced window starts at ``voiced`` really began."""
        if self._search == 0:
            return voiced
        lo, db = self._frames_db(max(voiced - self._search, self._last_end), voiced + WINDOW)
        before = (voiced - lo) // FRAME  # frames the model heard as silence
        if before < 3:
            return voiced
        loud = np.flatnonzero(db > self._threshold(db[:before]))
        anchor = np.searchsorted(loud, before)
        if anchor == loud.size:
            return voiced
        j = anchor
        while j > 0 and loud[j] - loud[j - 1] - 1 <= EDGE_GAP:
            j -= 1
        return lo + int(loud[j]) * FRAME

    def _refine_end(self, silence_start: int) -> int:
        """Where speech that the model heard as silence from ``silence_start`` really ended."""
        if self._search == 0:
            return silence_start
        assert self._segment_start is not None
        lo, db = self._frames_db(max(silence_start - self._search, self._segment_start), self.position)
        silent = (silence_start - lo) // FRAME
        if self.position - silence_start < 3 * FRAME:
            return silence_start
        loud = np.flatnonzero(db[: silent + WINDOW // FRAME] > self._threshold(db[silent:]))
        anchor = np.searchsorted(loud, silent) - 1
        if anchor < 0:
            return lo
        j = int(anchor)
        while j + 1 < loud.size and loud[j + 1] - loud[j] - 1 <= EDGE_GAP:
            j += 1
        return lo + (int(loud[j]) + 1) * FRAME

    def flush(self) -> list[Event]:
        """End the stream: close an open segment at the end of the audio fed, and reset the model."""
        events: list[Event] = []
        if self._segment_start is not None:
            if self._silence_start is not None:
                self._close(self._silence_start, events, heard=self._silence_start + WINDOW)
            else:
                self._close(self.position, events, heard=self.position)
        # Samples short of a window are dropped but still counted, so later positions stay exact.
        self._window_start = self.position
        self._filled = 0
        self._input[:] = 0.0
        self._state[:] = 0.0
        self._loud_since = None
        self._last_end = self._window_start
        return events
