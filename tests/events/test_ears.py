"""The ears as a whole: validation, fan-out, plug-in listeners, the threaded service, WAV files, long runs."""

from __future__ import annotations

import asyncio
import threading
import time
import tracemalloc
import wave
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy.io import wavfile

from events.bus import EventBus, Overflow
from events.ears import Ears, EarsConfig, EarsService, Threaded, listen_file, read_wav
from events.errors import BadInput
from events.hunch import Hunch
from events.stamp import Stamper
from events.turn import TurnConfig
from events.vocabulary import (
    AudioLevel,
    EndOfTurn,
    Event,
    Hint,
    SoundClass,
    SoundOnset,
    SpeechStarted,
    SpeechStopped,
    Transcript,
)
from tests import sounds


@pytest.fixture(scope="module")
def speech() -> np.ndarray:
    # Without Piper's sampling noise: the same samples every run, so the pause after "there," never grows
    # long enough to split the sentence (test_vad.py covers the sampled variants).
    return sounds.speech("Hello there, how are you doing today?", sampling_noise=False)


@pytest.fixture(scope="module")
def scene(speech) -> tuple[np.ndarray, dict[str, list[float]]]:
    """Speech, then three knocks, in room tone; returns the audio and the true positions (ms)."""
    knocks, starts = sounds.knocks(3)
    audio = np.concatenate([sounds.silence(0.8), speech, sounds.silence(1.2), knocks, sounds.silence(1.0)])
    audio += sounds.noise(audio.size / sounds.RATE, 0.003, seed=7)
    speech_end = 800 + speech.size * 1000 / sounds.RATE
    knock_at = speech_end + 1200
    return audio, {"start": [800.0], "stop": [speech_end], "onset": [knock_at + s for s in starts]}


def summary(events: list[Event]) -> list[tuple]:
    """What each event says, without its id, session and the wall-clock times it carries (``t_ns``, a
    turn's ``speech_end_ns``: when it was heard, not what)."""
    skip = ("id", "session")
    return [
        (
            type(e).__name__,
            *(getattr(e, k) for k in e.__struct_fields__ if k not in skip and not k.endswith("_ns")),
        )
        for e in events
    ]


def feed_all(ears: Ears, audio: np.ndarray, size: int) -> list[Event]:
    events: list[Event] = []
    for i in range(0, audio.size, size):
        events += ears.feed(audio[i : i + size])
    return events + ears.flush()


def check_truth(events: list[Event], truth: dict[str, list[float]]) -> None:
    starts = [e.audio_ms for e in events if isinstance(e, SpeechStarted)]
    stops = [e.audio_ms for e in events if isinstance(e, SpeechStopped)]
    onsets = [e.audio_ms for e in events if isinstance(e, SoundOnset)]
    assert len(starts) == len(truth["start"]) and len(stops) == len(truth["stop"]), (starts, stops)
    assert all(abs(a - b) <= 100 for a, b in zip(starts + stops, truth["start"] + truth["stop"], strict=True))
    assert len(onsets) == len(truth["onset"]), (onsets, truth["onset"])
    assert all(abs(a - b) <= 50 for a, b in zip(onsets, truth["onset"], strict=True)), (
        onsets,
        truth["onset"],
    )


def test_the_ears_hear_speech_knocks_and_the_end_of_the_turn(scene):
    audio, truth = scene
    events = feed_all(Ears(Stamper("t")), audio, 320)
    check_truth(events, truth)
    [turn] = [e for e in events if isinstance(e, EndOfTurn)]
    assert turn.audio_ms == next(e.audio_ms for e in events if isinstance(e, SpeechStopped))
    levels = [e for e in events if isinstance(e, AudioLevel)]
    assert len(levels) == audio.size // 320


def by_kind(events: list[Event]) -> list[tuple]:
    """Each kind's events in order (how kinds interleave within a frame depends on the frame's length)."""
    return sorted(summary(events), key=lambda fields: fields[0])


def test_odd_frame_sizes_give_the_same_events_as_one_second_frames(scene):
    audio, _ = scene
    whole = by_kind(feed_all(Ears(Stamper("t")), audio, sounds.RATE))
    for size in (37, 511, 4000):
        assert by_kind(feed_all(Ears(Stamper("t")), audio, size)) == whole, size


def test_pcm16_bytes_are_heard_like_the_same_int16_samples(scene):
    audio, _ = scene
    pcm = sounds.to_pcm16(audio)
    ints = np.frombuffer(pcm, dtype="<i2")
    ears = Ears(Stamper("t"))
    from_bytes = [e for i in range(0, len(pcm), 640) for e in ears.feed(pcm[i : i + 640])] + ears.flush()
    assert summary(from_bytes) == summary(feed_all(Ears(Stamper("t")), ints, 320))


# Any: the frames are wrong on purpose, some in their very type.
BAD_FRAMES: dict[str, tuple[Any, int, str, str]] = {
    "wrong_rate": (np.zeros(320, np.float32), 44_100, "sample_rate", "44100"),
    "odd_bytes": (b"\x00" * 641, 16_000, "samples", "even number of bytes"),
    "nan": (np.array([0.0, np.nan] * 160, np.float32), 16_000, "samples", "NaN"),
    "inf": (np.array([0.0, np.inf] * 160, np.float32), 16_000, "samples", "infinite"),
    "empty": (np.zeros(0, np.float32), 16_000, "samples", "empty"),
    "empty_bytes": (b"", 16_000, "samples", "empty"),
    "oversized": (np.zeros(sounds.RATE + 1, np.float32), 16_000, "samples", "over the limit"),
    "stereo": (np.zeros((320, 2), np.float32), 16_000, "samples", "mono"),
    "wrong_type": (np.zeros(320, np.int32), 16_000, "samples", "dtype"),
}


@pytest.mark.parametrize("name", BAD_FRAMES)
def test_a_bad_frame_raises_bad_input_naming_the_problem_and_loses_nothing(scene, name):
    audio, truth = scene
    frame, rate, field, words = BAD_FRAMES[name]
    clean = summary(feed_all(Ears(Stamper("t")), audio, 4000))
    ears = Ears(Stamper("t"))
    events: list[Event] = []
    for i in range(0, audio.size, 4000):
        events += ears.feed(audio[i : i + 4000])
        if i == 40_000:  # in the middle of the speech
            with pytest.raises(BadInput) as caught:
                ears.feed(frame, rate)
            assert caught.value.field == field and words in str(caught.value)
    events += ears.flush()
    assert summary(events) == clean
    assert ears.clock.samples == audio.size
    check_truth(events, truth)


class RecordingListener:
    """A plug-in listener that keeps what it was given: the frames' lengths and the events it saw."""

    def __init__(self) -> None:
        self.samples = 0
        self.seen: list[str] = []

    def feed(self, samples: np.ndarray) -> list[Event]:
        self.samples += samples.size
        return []

    def observe(self, event: Event) -> list[Event]:
        self.seen.append(type(event).__name__)
        return []

    def flush(self) -> list[Event]:
        return []


def test_an_extra_listener_gets_every_frame_and_every_event_of_the_others(scene):
    audio, _ = scene
    extra = RecordingListener()
    events = feed_all(Ears(Stamper("t"), EarsConfig(levels=None), extra=[extra]), audio, 511)
    assert extra.samples == audio.size
    # It also gets the hints the listeners give one another, which the ears never return.
    assert [name for name in extra.seen if name != "SilenceBegan"] == [type(e).__name__ for e in events]
    assert "SilenceBegan" in extra.seen
    assert not any(isinstance(e, Hint) for e in events)


class SlowTranscriber:
    """Slower than the real transcriber (0.1-0.5 s a segment): a final transcript 0.8 s after each segment."""

    def __init__(self, stamp: Stamper) -> None:
        self._stamp = stamp
        self._start = 0.0
        self.threads: set[int] = set()

    def feed(self, samples: np.ndarray) -> list[Event]:
        self.threads.add(threading.get_ident())
        return []

    def observe(self, event: Event) -> list[Event]:
        if isinstance(event, SpeechStarted):
            self._start = event.audio_ms
        if not isinstance(event, SpeechStopped):
            return []
        time.sleep(0.8)
        return [
            self._stamp(
                Transcript, text="hello there.", final=True, start_ms=self._start, audio_ms=event.audio_ms
            )
        ]

    def flush(self) -> list[Event]:
        return []


async def serve(ears: Ears, audio: np.ndarray, frame: int = 320) -> list[Event]:
    """Push ``audio`` through an ``EarsService`` as fast as it takes it; returns what the bus delivered."""
    bus = EventBus()
    sub = bus.subscribe(maxsize=100_000, overflow=Overflow.BLOCK)
    async with EarsService(ears, bus) as service:
        for i in range(0, audio.size, frame):
            await service.push(sounds.to_pcm16(audio[i : i + frame]))
    bus.close()
    return [event async for event in sub]


async def test_the_service_publishes_what_the_ears_hear_in_order(scene):
    audio, truth = scene
    pcm = np.frombuffer(sounds.to_pcm16(audio), dtype="<i2")
    published = await serve(Ears(Stamper("t")), audio)
    # The bus hands control events out before pending levels, so compare each kind's own sequence.
    assert by_kind(published) == by_kind(feed_all(Ears(Stamper("t")), pcm, 320))
    check_truth(published, truth)


async def test_the_service_tells_each_onset_and_start_of_speech_as_a_hunch_on_the_loop_before_it(scene):
    audio, _ = scene
    bus = EventBus()
    sub = bus.subscribe(SoundOnset, SpeechStarted, maxsize=100_000, overflow=Overflow.BLOCK)
    log: list[Hunch | Event] = []  # in the order the loop saw them
    loop = threading.get_ident()

    def hunch(h: Hunch) -> None:
        assert threading.get_ident() == loop
        log.append(h)

    async def published() -> None:
        log.extend([event async for event in sub])

    reading = asyncio.create_task(published())
    async with EarsService(Ears(Stamper("t")), bus) as service:
        service.on_hunch = hunch
        for i in range(0, audio.size, 320):
            await service.push(sounds.to_pcm16(audio[i : i + 320]))
    bus.close()
    await reading
    told = [i for i, e in enumerate(log) if isinstance(e, SoundOnset | SpeechStarted)]
    assert [type(log[i]) for i in told] == [SpeechStarted, SoundOnset, SoundOnset, SoundOnset]
    for i in told:
        event = log[i]
        assert isinstance(event, SoundOnset | SpeechStarted)
        kind = event.__struct_config__.tag
        near = 20 if isinstance(event, SoundOnset) else 200  # a start of speech is refined and padded
        hunched = [
            j
            for j, h in enumerate(log[:i])
            if isinstance(h, Hunch) and h.kind == kind and abs(h.audio_ms - event.audio_ms) <= near
        ]
        assert hunched and not any(
            h.dropped for h in log[hunched[0] : i] if isinstance(h, Hunch) and h.kind == kind
        )


async def test_a_slow_listener_in_its_own_thread_never_holds_up_the_others(scene):
    audio, truth = scene
    stamp = Stamper("t")
    slow = SlowTranscriber(stamp)
    config = EarsConfig(levels=None, turn=TurnConfig(transcript_wait_ms=60_000))
    published = await serve(Ears(stamp, config, extra=[Threaded(slow)]), audio)
    kinds = [type(e) for e in published]
    # The knocks come 1.2 s of audio after the speech: heard while the transcriber still works on it.
    assert kinds == [SpeechStarted, SpeechStopped, SoundOnset, SoundOnset, SoundOnset, Transcript, EndOfTurn]
    assert threading.get_ident() not in slow.threads and len(slow.threads) == 1
    assert isinstance(published[-1], EndOfTurn) and published[-1].transcript == "hello there."
    check_truth(published, truth)


async def test_the_service_refuses_a_bad_frame_at_push_and_keeps_listening(scene):
    audio, truth = scene
    bus = EventBus()
    sub = bus.subscribe(maxsize=100_000, overflow=Overflow.BLOCK)
    async with EarsService(Ears(Stamper("t")), bus) as service:
        for i in range(0, audio.size, 320):
            await service.push(audio[i : i + 320])
            if i == 32_000:
                with pytest.raises(BadInput, match="even number of bytes"):
                    await service.push(b"\x01\x02\x03")
        assert service.accepted.samples == audio.size
    bus.close()
    check_truth([event async for event in sub], truth)


def test_a_listener_that_falls_too_far_behind_is_taken_out_and_the_others_go_on(scene):
    audio, truth = scene

    class Stuck(RecordingListener):
        def feed(self, samples: np.ndarray) -> list[Event]:
            time.sleep(0.05)
            return super().feed(samples)

    stuck = Threaded(Stuck(), max_backlog_s=0.5, flush_timeout_s=5.0)
    events = feed_all(Ears(Stamper("t"), extra=[stuck]), audio, 320)
    assert stuck.overloaded
    check_truth(events, truth)


def write_wav(path: Path, audio: np.ndarray, rate: int, channels: int, kind: str) -> None:
    """Write ``audio`` (16 kHz) at ``rate`` with ``channels`` as ``kind`` samples."""
    from scipy.signal import resample_poly

    g = np.gcd(rate, sounds.RATE)
    x = resample_poly(audio, rate // g, sounds.RATE // g)
    x = np.repeat(x[:, None], channels, axis=1) if channels > 1 else x
    if kind == "int24":
        ints = np.round(np.clip(x, -1, 1 - 2**-23) * 2**23).astype("<i4")
        data = b"".join(v.tobytes()[:3] for v in ints.reshape(-1))
        with wave.open(str(path), "wb") as f:
            f.setnchannels(channels)
            f.setsampwidth(3)
            f.setframerate(rate)
            f.writeframes(data)
        return
    if kind == "float32":
        wavfile.write(path, rate, x.astype(np.float32))
        return
    if kind == "uint8":
        wavfile.write(path, rate, np.round(np.clip(x, -1, 127 / 128) * 128 + 128).astype(np.uint8))
        return
    scale = {"int16": 2**15, "int32": 2**31}[kind]
    wavfile.write(path, rate, np.round(np.clip(x, -1, 1 - 1 / scale) * scale).astype(kind))


@pytest.mark.parametrize(
    ("rate", "channels", "kind"),
    [
        (16_000, 1, "int16"),
        (8_000, 1, "uint8"),
        (22_050, 2, "int24"),
        (44_100, 1, "int32"),
        (48_000, 2, "float32"),
    ],
)
def test_listen_file_hears_a_wav_of_any_rate_channels_and_sample_type(tmp_path, scene, rate, channels, kind):
    audio, truth = scene
    path = tmp_path / "scene.wav"
    write_wav(path, audio, rate, channels, kind)
    assert abs(read_wav(path).size - audio.size) <= 2
    events = list(listen_file(path))
    check_truth(events, truth)
    assert not any(isinstance(e, AudioLevel) for e in events)
    assert [e.id for e in events] == [f"e{i + 1}" for i in range(len(events))]


def test_listen_file_refuses_a_file_that_is_not_a_wav(tmp_path):
    path = tmp_path / "notes.wav"
    path.write_text("not audio")
    with pytest.raises(BadInput) as caught:
        list(listen_file(path))
    assert caught.value.field == "file"


def test_a_ten_minute_stream_keeps_positions_exact_and_memory_flat(speech):
    # A 10 s block (speech, knocks, room tone) repeated 60 times, fed in one-second frames as fast as it goes.
    block_s, speech_at, knock_at = 10.0, 0.5, 4.0
    block = sounds.noise(block_s, 0.003, seed=1)
    block, _ = sounds.place(block, speech, speech_at)
    knocks, starts = sounds.knocks(2)
    block, _ = sounds.place(block, knocks, knock_at)
    speech_end_ms = speech_at * 1000 + speech.size * 1000 / sounds.RATE
    ears = Ears(Stamper("t"))
    counts: dict[type, int] = {}
    worst = {SpeechStarted: 0.0, SpeechStopped: 0.0, SoundOnset: 0.0}
    last: Event | None = None
    tracemalloc.start()
    try:
        for n in range(60):
            if n == 6:
                before = tracemalloc.get_traced_memory()[0]
            for i in range(0, block.size, sounds.RATE):
                for event in ears.feed(block[i : i + sounds.RATE]):
                    counts[type(event)] = counts.get(type(event), 0) + 1
                    last = event
                    assert isinstance(
                        event,
                        SpeechStarted | SpeechStopped | AudioLevel | SoundOnset | SoundClass | EndOfTurn,
                    )
                    offset = (event.audio_ms // (block_s * 1000)) * block_s * 1000
                    local = event.audio_ms - offset
                    if isinstance(event, SpeechStarted):
                        worst[SpeechStarted] = max(worst[SpeechStarted], abs(local - speech_at * 1000))
                    elif isinstance(event, SpeechStopped):
                        worst[SpeechStopped] = max(worst[SpeechStopped], abs(local - speech_end_ms))
                    elif isinstance(event, SoundOnset):
                        error = min(abs(local - knock_at * 1000 - s) for s in starts)
                        worst[SoundOnset] = max(worst[SoundOnset], error)
        growth = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert counts[SpeechStarted] == counts[SpeechStopped] == counts[EndOfTurn] == 60
    assert counts[SoundOnset] == 120
    assert worst[SpeechStarted] <= 100 and worst[SpeechStopped] <= 100 and worst[SoundOnset] <= 50, worst
    assert isinstance(last, AudioLevel) and last.audio_ms == 600_000.0
    assert ears.clock.ms() == 600_000.0
    assert growth < 512 * 1024, growth
