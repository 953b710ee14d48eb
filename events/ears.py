"""The ears: one validated audio stream fanned out to every listener, live on an event bus or from a file.

- ``Ears`` is the synchronous pipeline. Each frame is validated once (PCM16 bytes or a float / int16 array;
  a bad frame raises ``BadInput`` before anything changes) and fed to every listener: the voice detector,
  the level meter, the onset detector, the extra listeners passed in (a sound classifier, a
  transcriber...) and the turn detector. Then the events they made are offered to every listener that has
  ``observe(event)`` (the turn detector needs the speech and transcript events; a transcriber may cut its
  segments at them), so an observer has always had the audio an event speaks of. Last, listeners that have
  ``poll()`` say what has become due (the turn detector's silence, a threaded listener's results). One
  ``AudioClock`` counts the samples accepted.
- ``Threaded`` runs a slow listener (the transcriber: 0.1-0.5 s a segment) in its own thread, so it never
  holds up the others; its events come back through ``poll`` and take their place in the stream.
- ``EarsService`` runs an ``Ears`` off the event loop in a worker thread and publishes its events to an
  ``EventBus`` in the order they were made; the listeners' hunches (``events.hunch``: the onset and voice
  detectors') go to ``on_hunch`` on the loop (before the events of the same frame), not to the bus.
- ``listen_file`` runs the ears over a WAV file and yields what they hear (``onstage listen FILE.wav``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import msgspec
import numpy as np
from scipy.io import wavfile
from scipy.signal import resample_poly

from events.audio import MAX_FRAME_SAMPLES, SAMPLE_RATE, AudioClock, validate_samples
from events.bus import EventBus
from events.errors import BadInput
from events.hunch import Hunch, Hunching
from events.levels import LevelConfig, LevelMeter
from events.listener import Listener
from events.onset import OnsetConfig, OnsetDetector
from events.stamp import Stamper
from events.turn import TurnConfig, TurnDetector
from events.vad import VadConfig, VoiceDetector
from events.vocabulary import Event, Hint

log = logging.getLogger(__name__)


@runtime_checkable
class Observer(Protocol):
    """A listener that also wants the events the other listeners produce."""

    def observe(self, event: Event) -> list[Event]: ...


@runtime_checkable
class Pollable(Protocol):
    """A listener whose events may become ready between frames (one running in its own thread)."""

    def poll(self) -> list[Event]: ...


class EarsConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Settings of the built-in listeners; None leaves a listener out (the voice detector always runs)."""

    vad: VadConfig = msgspec.field(default_factory=VadConfig)
    levels: LevelConfig | None = msgspec.field(default_factory=LevelConfig)
    onset: OnsetConfig | None = msgspec.field(default_factory=OnsetConfig)
    turn: TurnConfig | None = msgspec.field(default_factory=TurnConfig)
    max_frame_samples: int = MAX_FRAME_SAMPLES
    """The largest frame accepted (one second)."""


class Ears:
    """The listeners of one audio stream, fed in order from one validated frame."""

    def __init__(
        self, stamp: Stamper, config: EarsConfig | None = None, extra: Sequence[Listener] = ()
    ) -> None:
        self.config = cfg = config if config is not None else EarsConfig()
        self.clock = AudioClock()
        self.vad = VoiceDetector(stamp, cfg.vad)
        listeners: list[Listener] = [self.vad]
        if cfg.levels is not None:
            listeners.append(LevelMeter(stamp, cfg.levels))
        if cfg.onset is not None:
            listeners.append(OnsetDetector(stamp, cfg.onset))
        listeners.extend(extra)
        if cfg.turn is not None:
            listeners.append(TurnDetector(stamp, cfg.turn))
        self.listeners: tuple[Listener, ...] = tuple(listeners)
        self._observers = tuple(x for x in listeners if isinstance(x, Observer))
        self._hunching = tuple(x for x in listeners if isinstance(x, Hunching))
        self._pollers = tuple(x for x in listeners if isinstance(x, Pollable))

    def validate(self, samples: np.ndarray | bytes | bytearray | memoryview, sample_rate: int) -> np.ndarray:
        """Check a frame (``BadInput`` if it is unusable) and return it as float32 samples; changes nothing."""
        return validate_samples(samples, sample_rate, self.config.max_frame_samples)

    def feed(
        self, samples: np.ndarray | bytes | bytearray | memoryview, sample_rate: int = SAMPLE_RATE
    ) -> list[Event]:
        """Validate the next frame and run every listener on it; returns the events it completed, in order."""
        return self.process(self.validate(samples, sample_rate))

    def process(self, frame: np.ndarray) -> list[Event]:
        """Run every listener on a frame that ``validate`` returned, then the observers, then the pollers."""
        made = [(listener, listener.feed(frame)) for listener in self.listeners]
        self.clock.advance(frame.size)
        out: list[Event] = []
        for listener, events in made:
            self._spread(events, listener, out)
        return out + self.poll()

    def hunches(self) -> list[Hunch]:
        """The hunches the listeners told since the last call (``events.hunch``), listener by listener."""
        return [h for listener in self._hunching for h in listener.take_hunches()]

    def observe(self, event: Event) -> list[Event]:
        """Offer an event from outside the ears (a client's transcript) to the observing listeners; returns
        what they make of it (an ``EndOfTurn`` it completes)."""
        out: list[Event] = []
        self._spread([event], None, out)
        return out[1:]

    def poll(self) -> list[Event]:
        """Events that have become due: a turn's silence, what threaded listeners finished meanwhile."""
        out: list[Event] = []
        for listener in self._pollers:
            self._spread(listener.poll(), listener, out)
        return out

    def flush(self) -> list[Event]:
        """End the stream: listener after listener closes what is open, its events offered to the observers at
        once (speech stops, then its transcript comes, then the turn ends)."""
        out: list[Event] = []
        for listener in self.listeners:
            self._spread(listener.flush(), listener, out)
        return out

    def close(self) -> None:
        """Stop the threads of threaded listeners."""
        for listener in self.listeners:
            if isinstance(listener, Threaded):
                listener.close()

    def _spread(self, events: Iterable[Event], source: object, out: list[Event]) -> None:
        """Append ``events`` to ``out``, offering each to every observer but its source, recursively.

        A ``Hint`` is offered to the observers and kept out of ``out``: it is the listeners' own business."""
        todo = deque((event, source) for event in events)
        while todo:
            event, src = todo.popleft()
            if not isinstance(event, Hint):
                out.append(event)
            for observer in self._observers:
                if observer is not src:
                    todo.extend((reply, observer) for reply in observer.observe(event))


class Threaded:
    """Runs a slow listener in its own thread; to the ``Ears`` it is a listener that never makes them wait.

    ``feed`` and ``observe`` only queue their input, in order; the wrapped listener's events come out of
    ``poll`` (``on_ready`` is called as soon as there are some, so a service can poll at once). ``flush``
    waits until the wrapped listener has caught up and flushed. A listener that falls more than
    ``max_backlog_s`` of audio behind is taken out (logged, ``overloaded`` set) rather than fed a stream
    with holes in it, which would shift every position it reports.
    """

    def __init__(
        self, listener: Listener, *, max_backlog_s: float = 120.0, flush_timeout_s: float = 60.0
    ) -> None:
        self.listener = listener
        self.name = type(listener).__name__
        self.on_ready: Callable[[], None] | None = None
        self.overloaded = False
        self._max_backlog = round(max_backlog_s * SAMPLE_RATE)
        self._flush_timeout = flush_timeout_s
        self._backlog = 0
        self._lock = threading.Lock()
        self._inbox: deque[Event] = deque()
        self._queue: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self._observes = isinstance(listener, Observer)
        self._thread = threading.Thread(target=self._run, name=f"ears-{self.name}", daemon=True)
        self._thread.start()

    def feed(self, samples: np.ndarray) -> list[Event]:
        if self.overloaded:
            return []
        with self._lock:
            if self._backlog + samples.size > self._max_backlog:
                self.overloaded = True
                behind = self._backlog / SAMPLE_RATE
                log.error("%s fell %.0f s behind the audio: taken out", self.name, behind)
                return []
            self._backlog += samples.size
        self._queue.put(("feed", samples.copy()))  # the caller may reuse its buffer
        return []

    def observe(self, event: Event) -> list[Event]:
        if self._observes and not self.overloaded:
            self._queue.put(("observe", event))
        return []

    def poll(self) -> list[Event]:
        out = []
        while self._inbox:
            out.append(self._inbox.popleft())
        return out

    def flush(self) -> list[Event]:
        if self._thread.is_alive():
            done = threading.Event()
            self._queue.put(("flush", done))
            if not done.wait(self._flush_timeout):
                log.error("%s did not flush within %.0f s", self.name, self._flush_timeout)
        return self.poll()

    def close(self) -> None:
        """Stop the thread once it has done what is queued."""
        self._queue.put(("stop", None))
        self._thread.join()

    def _run(self) -> None:
        while True:
            kind, payload = self._queue.get()
            if kind == "stop":
                return
            try:
                if kind == "feed":
                    events = self.listener.feed(payload)
                elif kind == "observe":
                    events = self.listener.observe(payload)  # type: ignore[attr-defined]  # queued only if it observes
                else:
                    events = self.listener.flush()
            except Exception:
                log.exception("%s failed on %s", self.name, kind)
                events = []
            if kind == "feed":
                with self._lock:
                    self._backlog -= payload.size
            self._inbox.extend(events)
            if kind == "flush":
                payload.set()
            elif events and self.on_ready is not None:
                self.on_ready()


_STOP = ("stop", None)  # the worker's last item


class EarsService:
    """Runs ``Ears`` in a worker thread and publishes their events to a bus, in the order they were made.

    ``await push(frame)`` validates on the caller's side (``BadInput`` at once, nothing accepted is lost)
    and queues the frame; if the worker is ``backlog_frames`` behind, ``push`` waits (back-pressure on the
    audio source) rather than dropping audio. The worker hands events to one publishing task on the loop;
    at most ``pending_batches`` batches wait for it, after which the worker waits. ``close`` flushes the
    listeners, publishes what remains and stops the threads. Use one producer task for ``push``.
    """

    def __init__(
        self, ears: Ears, bus: EventBus, *, backlog_frames: int = 250, pending_batches: int = 256
    ) -> None:
        self.ears = ears
        self.bus = bus
        self.accepted = AudioClock()
        """Samples accepted by ``push`` (the worker's ``ears.clock`` follows it)."""
        self.errors = 0
        """Frames a listener failed on (each logged with its traceback)."""
        self._frames: queue.Queue[tuple[str, Any]] = queue.Queue(backlog_frames)
        self._room = threading.Semaphore(pending_batches)
        self._outbox: asyncio.Queue[list[Event] | None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._worker: threading.Thread | None = None
        self._publisher: asyncio.Task[None] | None = None
        self._push_lock = asyncio.Lock()
        self._closed = False
        self.on_hunch: Callable[[Hunch], None] | None = None
        """Called on the loop with each of the listeners' hunches (``events.hunch``), as it is told."""

    async def start(self) -> None:
        """Start the worker thread and the publishing task."""
        if self._worker is not None:
            raise RuntimeError("EarsService already started")
        self._loop = asyncio.get_running_loop()
        self._outbox = asyncio.Queue()
        for listener in self.ears.listeners:
            if isinstance(listener, Threaded):
                listener.on_ready = self._wake
        self._worker = threading.Thread(target=self._work, name="ears", daemon=True)
        self._worker.start()
        self._publisher = asyncio.create_task(self._publish(), name="ears-publish")

    async def __aenter__(self) -> EarsService:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def push(
        self, samples: np.ndarray | bytes | bytearray | memoryview, sample_rate: int = SAMPLE_RATE
    ) -> None:
        """Validate one frame of audio and queue it for the listeners."""
        if self._worker is None or self._closed:
            raise RuntimeError("EarsService is not running")
        frame = self.ears.validate(samples, sample_rate)
        if frame is samples or frame.base is not None:
            frame = frame.copy()  # the caller may reuse its buffer before the worker reads it
        async with self._push_lock:
            self.accepted.advance(frame.size)
            await self._put(("frame", frame))

    async def close(self) -> None:
        """Flush the listeners, publish their last events and stop. Idempotent."""
        if self._closed or self._worker is None:
            self._closed = True
            return
        self._closed = True
        async with self._push_lock:
            await self._put(("flush", None))
            await self._put(_STOP)
        await asyncio.to_thread(self._worker.join)
        await asyncio.to_thread(self.ears.close)
        assert self._outbox is not None and self._publisher is not None
        self._outbox.put_nowait(None)
        await self._publisher

    async def _put(self, item: tuple[str, Any]) -> None:
        try:
            self._frames.put_nowait(item)
        except queue.Full:
            await asyncio.to_thread(self._frames.put, item)

    def _wake(self) -> None:
        # Called from a threaded listener: a frame in the queue will poll anyway.
        with contextlib.suppress(queue.Full):
            self._frames.put_nowait(("poll", None))

    def _work(self) -> None:
        while True:
            kind, frame = self._frames.get()
            if kind == "stop":
                return
            try:
                if kind == "frame":
                    events = self.ears.process(frame)
                    self._tell(self.ears.hunches())
                elif kind == "poll":
                    events = self.ears.poll()
                else:
                    events = self.ears.flush()
            except Exception:
                self.errors += 1
                log.exception("a listener failed on a %s", kind)
                continue
            if events:
                self._room.acquire()
                assert self._loop is not None and self._outbox is not None
                self._loop.call_soon_threadsafe(self._outbox.put_nowait, events)

    def _tell(self, hunches: list[Hunch]) -> None:
        tell = self.on_hunch
        if hunches and tell is not None:
            assert self._loop is not None
            for hunch in hunches:
                self._loop.call_soon_threadsafe(tell, hunch)

    async def _publish(self) -> None:
        assert self._outbox is not None
        while (events := await self._outbox.get()) is not None:
            try:
                await self.bus.publish_all(events)
            finally:
                self._room.release()


def read_wav(path: str | Path) -> np.ndarray:
    """A WAV file as 16 kHz mono float32: any rate (resampled), any channels (averaged), 8/16/24/32-bit
    integer or float samples. Raises ``BadInput`` (field ``"file"``) for a file that is not such a WAV."""
    try:
        rate, data = wavfile.read(str(path))
    except ValueError as exc:
        raise BadInput("file", f"{path} is not a readable WAV file ({exc})") from exc
    if data.dtype == np.uint8:
        audio = (data.astype(np.float32) - 128.0) / 128.0
    elif data.dtype == np.int16:
        audio = data.astype(np.float32) / 32768.0
    elif data.dtype == np.int32:  # 32-bit, and 24-bit, which scipy left-justifies into 32 bits
        audio = (data / 2147483648.0).astype(np.float32)
    elif np.issubdtype(data.dtype, np.floating):
        audio = data.astype(np.float32)
    else:
        raise BadInput("file", f"{path} has samples of an unsupported type {data.dtype}")
    if audio.ndim == 2:
        audio = audio.mean(axis=1, dtype=np.float32)
    if rate != SAMPLE_RATE:
        g = np.gcd(SAMPLE_RATE, rate)
        audio = resample_poly(audio, SAMPLE_RATE // g, rate // g).astype(np.float32)
    return audio


def listen_file(
    path: str | Path,
    *,
    config: EarsConfig | None = None,
    extra: Sequence[Listener] = (),
    levels: bool = False,
    frame_ms: float = 20.0,
    stamper: Stamper | None = None,
) -> Iterator[Event]:
    """What the ears hear in a WAV file, as they would hear it live in frames of ``frame_ms``.

    Events come in the order they are made. Each listener decides as soon as it can, so an event decided
    late (``SpeechStarted``, confirmed ``min_speech_ms`` after it began) carries a position earlier than
    events yielded before it. ``levels`` adds the 50-a-second ``AudioLevel`` events; ``extra`` listeners
    (a classifier, a transcriber) run inline, one after another; make them with the same ``stamper`` so
    event ids stay unique. Raises ``BadInput`` for an unreadable file
    or bad samples (NaN or infinite values in a float WAV).
    """
    config = config if config is not None else EarsConfig()
    if not levels:
        config = msgspec.structs.replace(config, levels=None)
    audio = read_wav(path)
    ears = Ears(stamper if stamper is not None else Stamper("file"), config, extra)
    step = max(1, round(frame_ms * SAMPLE_RATE / 1000))
    try:
        for start in range(0, audio.size, step):
            yield from ears.feed(audio[start : start + step])
        yield from ears.flush()
    finally:
        ears.close()
