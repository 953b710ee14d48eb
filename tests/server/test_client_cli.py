"""``onstage client`` against a real server: it streams a WAV with timed inputs, saves the call, reports."""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path

import av
import numpy as np
import pytest
from PIL import Image, WebPImagePlugin
from scipy.io import wavfile

from server import demo_audio
from server.cli import build_parser
from server.client import SessionClient
from server.client_cli import FRAME_S, TimedInput, converse, read_wav_16k, run, talk


def stereo_wav_at_22k(path: Path, audio: np.ndarray) -> Path:
    """``audio`` (16 kHz) as a 22.05 kHz stereo 16-bit WAV: not what the protocol takes, as users' files are."""
    resampled = np.interp(np.arange(0, audio.size, 16000 / 22050), np.arange(audio.size), audio)
    pcm = (np.clip(resampled, -1, 0.999) * 32767).astype("<i2")
    wavfile.write(path, 22050, np.stack([pcm, pcm], axis=1))
    return path


@pytest.fixture(scope="module")
def talk_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Half a second of room tone, a spoken greeting, then three knocks: about 3.5 s."""
    room = demo_audio.noise(3.6, level=0.002, seed=3)
    audio, _ = demo_audio.place(room, demo_audio.speech("Hello there!", sampling_noise=False), 0.5)
    audio, _ = demo_audio.place(audio, demo_audio.knocks()[0], 2.4)
    return stereo_wav_at_22k(tmp_path_factory.mktemp("client") / "talk.wav", audio)


def client_args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["client", *argv])


def report_rows(text: str, kind: str) -> list[str]:
    """The latency table's rows for inputs of ``kind`` (e.g. "gesture: wave", or "sound" for all sounds)."""
    return [line for line in text.splitlines() if line.startswith("|") and f"| {kind}" in line]


def report_count(text: str, pattern: str) -> int:
    """The number ``pattern``'s group catches in the report (which must have it)."""
    match = re.search(pattern, text, re.MULTILINE)
    assert match, f"no {pattern!r} in\n{text}"
    return int(match.group(1))


REFLECTED = re.compile(r"\| e\d+ \| \d+ \|$")
"""The end of a latency row whose input became an event and a frame reflected it."""


def test_a_wav_at_any_rate_and_channel_count_is_read_as_16k_mono(talk_wav: Path) -> None:
    pcm = read_wav_16k(talk_wav)
    assert pcm.dtype == np.dtype("<i2") and pcm.ndim == 1
    assert pcm.size == pytest.approx(3.6 * 16000, abs=5)


def test_timed_inputs_must_say_when_and_what() -> None:
    args = client_args("--gesture", "2.5:wave", "--text", "4:hello: you")
    assert [(i.at_s, i.kind, i.value) for i in args.gesture + args.text] == [
        (2.5, "gesture", "wave"),
        (4.0, "text", "hello: you"),
    ]
    for bad in ("wave", "x:wave", "-1:wave", "2.5:"):
        with pytest.raises(SystemExit):
            client_args("--gesture", bad)


def test_an_unknown_video_format_is_refused_before_connecting(tmp_path: Path) -> None:
    assert run(client_args("--out", str(tmp_path / "call.avi"), "--url", "ws://127.0.0.1:9/none")) == 2


@pytest.mark.asyncio(loop_scope="module")
async def test_a_call_is_saved_as_mp4_with_the_voice_and_reactions_are_reported(
    url: str, talk_wav: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "call.mp4"
    argv = [str(talk_wav), "--url", url, "--seed", "4", "--gesture", "1.0:wave", "--text", "2.0:hello"]
    assert await talk(client_args(*argv, "--tail", "1.0", "--out", str(out))) == 0
    report = capsys.readouterr().out

    # The files hold what the client received: every frame, and every audio slice at its frame's time.
    frames = report_count(report, r"^frames received: (\d+) of \d+")
    slices = report_count(report, r"^audio slices received: (\d+)$")
    assert frames > 0 and slices > 0
    with av.open(str(out)) as container:
        video = container.streams.video[0]
        assert (video.codec_context.name, video.width, video.height) == ("h264", 128, 128)
        assert sum(1 for _ in container.decode(video)) == frames
    with av.open(str(out)) as container:
        assert container.streams.audio[0].codec_context.sample_rate == 24000
    rate, voice = wavfile.read(out.with_suffix(".wav"))
    assert rate == 24000 and voice.dtype == np.int16 and voice.size >= slices * rate // 24

    # Every input sent was accepted and reflected, and so was every speech start the server heard (when
    # the inputs go out is test_timed_inputs_go_out_with_the_audio_frame_at_their_time's business).
    for kind, n in (("gesture: wave", 1), ("text: hello", 1), ("speech: started", 1)):
        rows = report_rows(report, kind)
        assert len(rows) == n, f"{n} {kind} row(s) expected in\n{report}"
        assert all(REFLECTED.search(row) for row in rows), f"{kind} got no reflecting frame:\n{report}"
    # The knocks were heard, and the first onset (a startle) reflected; later ones fall in its cool-down.
    sounds = report_rows(report, "sound: ")
    assert sounds and REFLECTED.search(sounds[0]), f"the first sound got no reflecting frame:\n{report}"
    assert re.search(r"^\| all \| \d+ \| \d+ \| \d+ \| \d+ \| \d+ \|$", report, re.MULTILINE)


@pytest.mark.asyncio(loop_scope="module")
async def test_timed_inputs_go_out_with_the_audio_frame_at_their_time(url: str) -> None:
    inputs = [TimedInput(0.1, "gesture", "wave"), TimedInput(0.25, "text", "hi")]
    pcm = (demo_audio.noise(0.4, level=0.002, seed=1) * 32767).astype("<i2")
    async with SessionClient(url) as client:
        await client.start(seed=1)
        before = time.monotonic()
        sent, frame_sent = await converse(client, pcm, inputs, tail_s=0.1)
        refs = {ref for _, ref, _ in sent}
        await client.wait_for(
            lambda m: refs <= {a.get("ref") for a in client.received.of_type("input.accepted")}
        )
    # Paced by the clock: no audio frame goes out before its time, 20 ms after the one before.
    assert frame_sent.size == round(0.5 / FRAME_S)
    assert np.all(frame_sent >= before + np.arange(frame_sent.size) * FRAME_S)
    # An input goes out no earlier than its time, just before the audio frame that reaches it.
    for item, _, t in sent:
        n = next(i for i in range(frame_sent.size) if item.at_s <= i * FRAME_S)
        assert t >= before + item.at_s
        assert frame_sent[n - 1] <= t <= frame_sent[n]


@pytest.mark.asyncio(loop_scope="module")
async def test_a_call_can_be_saved_as_an_animated_webp(url: str, tmp_path: Path, capsys) -> None:
    out = tmp_path / "call.webp"
    assert (
        await talk(client_args("--url", url, "--gesture", "0.2:wave", "--tail", "1.0", "--out", str(out)))
        == 0
    )
    # The animation holds the call's frames, however many came (a loaded machine sends fewer in the same
    # time); frames that repeat the one before may be merged into it by the encoder.
    received = report_count(capsys.readouterr().out, r"frames received: (\d+) of")
    with Image.open(out) as image:
        assert isinstance(image, WebPImagePlugin.WebPImageFile)
        assert image.is_animated and 2 <= image.n_frames <= received and image.size == (128, 128)
