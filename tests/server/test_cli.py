"""The onstage command line: listen prints what is heard, render writes a video, bad input says why."""

from __future__ import annotations

import json

import msgspec
import numpy as np
import pytest
from PIL import Image, WebPImagePlugin
from scipy.io import wavfile

from events.vocabulary import (
    AudioLevel,
    EndOfTurn,
    SoundClass,
    SoundOnset,
    SpeechStarted,
    SpeechStopped,
    Transcript,
    decode_event,
)
from server.cli import main
from server.demo_audio import write_demo_wav
from streaming_model.render import DEMO


def test_listen_prints_one_json_event_per_line_with_its_type_and_position(tmp_path, capsys) -> None:
    wav = write_demo_wav(tmp_path / "demo.wav")
    assert main(["listen", str(wav), "--no-transcripts"]) == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    kinds = {e["type"] for e in events}
    assert {"speech.started", "speech.stopped", "sound.onset", "turn.ended"} <= kinds
    assert all(isinstance(e["audio_ms"], float) for e in events)
    assert "audio.level" not in kinds
    started = [e["audio_ms"] for e in events if e["type"] == "speech.started"]
    assert started[0] == pytest.approx(500.0, abs=100.0)  # the demo's first words begin at 0.5 s


def test_listen_with_levels_prints_every_event_the_ears_make_as_json_that_decodes_back(
    tmp_path, capsys
) -> None:
    # The real listeners (silero-vad, onsets, YAMNet, Whisper, the level meter with its pitch) over the demo
    # recording: every kind of event they make reaches the command line, voiced frames with their pitch.
    wav = write_demo_wav(tmp_path / "demo.wav")
    assert main(["listen", str(wav), "--levels"]) == 0
    lines = capsys.readouterr().out.splitlines()
    events = [decode_event(line) for line in lines]
    kinds = {type(e) for e in events}
    assert {SpeechStarted, SpeechStopped, SoundOnset, SoundClass, Transcript, EndOfTurn, AudioLevel} <= kinds
    assert [msgspec.json.encode(e).decode() for e in events] == lines  # nothing lost in the round trip
    pitches = [e.pitch_hz for e in events if isinstance(e, AudioLevel) and e.pitch_hz is not None]
    # A voice's range (the tracker looks for 60 to 500 Hz, give or take the interpolation between lags).
    assert pitches and all(type(p) is float and 55.0 <= p <= 520.0 for p in pitches)


def test_listen_on_a_file_that_is_not_a_wav_says_so(tmp_path, capsys) -> None:
    bad = tmp_path / "notes.wav"
    bad.write_text("not audio")
    assert main(["listen", str(bad)]) == 1
    assert "onstage listen:" in capsys.readouterr().err


@pytest.mark.parametrize("seconds", [0.0, 1.0])
def test_listen_to_a_file_with_nothing_in_it_says_nothing_was_heard(tmp_path, capsys, seconds) -> None:
    quiet = tmp_path / "quiet.wav"
    wavfile.write(quiet, 16_000, np.zeros(int(16_000 * seconds), dtype=np.int16))
    assert main(["listen", str(quiet), "--no-transcripts", "--no-sounds"]) == 0
    said = capsys.readouterr()
    assert said.out == ""
    assert f"nothing heard in {quiet}" in said.err


def test_render_writes_an_animated_webp_of_the_demo_sequence(tmp_path, capsys) -> None:
    out = tmp_path / "demo.webp"
    assert main(["render", str(out), "--source", "both"]) == 0
    with Image.open(out) as image:
        assert isinstance(image, WebPImagePlugin.WebPImageFile)
        assert image.n_frames == 4 * round(sum(b.seconds for b in DEMO) * 6)  # 24 fps, 4-frame chunks
        assert image.size == (2 * 256, 2 * 128)  # truth and model side by side, doubled
    assert "wave" in capsys.readouterr().out


def test_render_refuses_a_format_it_cannot_write(tmp_path) -> None:
    assert main(["render", str(tmp_path / "demo.avi")]) == 2


def test_render_refuses_a_folder_it_cannot_write_in_before_it_renders(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setattr("streaming_model.render.render", lambda *a, **kw: pytest.fail("it rendered first"))
    assert main(["render", str(tmp_path / "missing" / "demo.webp")]) == 2
    assert f"cannot write in {tmp_path / 'missing'}" in capsys.readouterr().err


def test_serve_takes_a_backend_and_its_options_and_names_a_bad_one(capsys) -> None:
    from server.cli import build_parser
    from server.serve_cli import serve_config

    args = build_parser().parse_args(
        ["serve", "--backend", "world", "--backend-option", "fps=16", "--backend-option", "width=160"]
    )
    config = serve_config(args)
    assert (config.backend, config.backend_options) == ("world", {"fps": "16", "width": "160"})
    assert main(["serve", "--backend", "sora"]) == 2
    assert "unknown backend 'sora'; known: tiny, world" in capsys.readouterr().err
    assert main(["serve", "--backend", "world", "--backend-option", "fps"]) == 2
    assert "backend option 'fps': write it as NAME=VALUE" in capsys.readouterr().err
    # Options are checked when the backend loads, before anything listens.
    assert main(["serve", "--backend", "world", "--backend-option", "fps=0", "--port", "0"]) == 2
    assert "world option fps must be in [1, 60], got 0" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (
            ["--baseline", "stepz=2"],
            "unknown option 'stepz'; the options are: steps, cache, precision, linears, cache_noise",
        ),
        (["--candidate", "cache=fast"], "option cache takes write_time or naive, not 'fast'"),
        (["--candidate", "precision=fp16"], "option precision takes auto, bf16, fp32, not 'fp16'"),
        (["--seeds", "1"], "give at least 2 seeds"),
        (["--actions", "wave", "dance"], "unknown action 'dance'; the actions are: idle, walk_left"),
        (["--actions", "wave", "sit", "wave"], "give each action once"),
        (["--identity", "6"], "the identities are 0 to 5, not 6"),
        (["--jobs", "0"], "give at least 1 job"),
        (["--margin", "-1"], "the margin must be a number >= 0"),
        (["--rebuild"], "results.json does not exist: run the evaluation first"),
    ],
)
def test_eval_names_what_is_wrong_with_its_arguments_and_runs_nothing(argv, says, tmp_path, capsys) -> None:
    out = tmp_path / "report"
    assert main(["eval", "--out", str(out), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("onstage eval: ") and says in err
    assert not (out / "results.json").exists()


def test_eval_rebuild_refuses_a_results_file_that_is_not_one(tmp_path, capsys) -> None:
    (tmp_path / "results.json").write_text('{"seeds": "many"}')
    assert main(["eval", "--out", str(tmp_path), "--rebuild"]) == 2
    assert "is not the results of an onstage eval run" in capsys.readouterr().err


def test_serve_takes_ray_from_the_flag_or_the_config_file_and_names_a_bad_setting(tmp_path, capsys) -> None:
    from server.cli import build_parser
    from server.serve_cli import serve_config

    assert serve_config(build_parser().parse_args(["serve"])).ray.address is None  # no Ray unless asked
    assert serve_config(build_parser().parse_args(["serve", "--ray", "local"])).ray.address == "local"
    toml = tmp_path / "onstage.toml"
    toml.write_text('[server.ray]\naddress = "10.0.0.5:6379"\nlocal_slots = 3\n')
    config = serve_config(build_parser().parse_args(["serve", "--config", str(toml)]))
    assert (config.ray.address, config.ray.local_slots) == ("10.0.0.5:6379", 3)
    flagged = serve_config(build_parser().parse_args(["serve", "--config", str(toml), "--ray", "local"]))
    assert (flagged.ray.address, flagged.ray.local_slots) == ("local", 3)
    toml.write_text('[server.ray]\naddress = "local"\nsessions_per_slot = 0\n')
    assert main(["serve", "--config", str(toml)]) == 2
    assert "ray setting sessions_per_slot must be at least 1, got 0" in capsys.readouterr().err


def test_serve_takes_how_sessions_share_the_generator_and_names_a_bad_setting(tmp_path, capsys) -> None:
    from server.cli import build_parser
    from server.serve_cli import serve_config

    default = serve_config(build_parser().parse_args(["serve"]))
    assert (default.batching, default.lanes, default.max_batch) == ("exact", 0, 8)
    toml = tmp_path / "onstage.toml"
    # admission weighs the generators and the machine by default
    assert (default.limits.admission, default.limits.machine_busy_max) == ("measured", 0.6)
    toml.write_text(
        '[server]\nbatching = "off"\nlanes = 3\n[server.limits]\ngenerator_busy_max = 0.7\nadmission = "ceiling"\n'
    )
    config = serve_config(build_parser().parse_args(["serve", "--config", str(toml)]))
    assert (config.batching, config.lanes, config.limits.generator_busy_max) == ("off", 3, 0.7)
    assert config.limits.admission == "ceiling"
    for bad, says in (
        ('[server]\nbatching = "sometimes"\n', "batching"),
        ("[server]\nmax_batch = 0\n", "lanes must be >= 0 and max_batch >= 1, got 0 and 0"),
        ("[server.limits]\ngenerator_busy_max = 1.5\n", "generator_busy_max must be in (0, 1], got 1.5"),
        ("[server.limits]\nmachine_busy_max = 0.0\n", "machine_busy_max must be in (0, 1], got 0.0"),
        ('[server.limits]\nadmission = "never"\n', "admission"),
    ):
        toml.write_text(bad)
        assert main(["serve", "--config", str(toml)]) == 2
        assert says in capsys.readouterr().err


def test_serve_reports_loop_stalls_only_when_asked_and_refuses_a_negative_threshold(tmp_path, capsys) -> None:
    from server.cli import build_parser
    from server.serve_cli import serve_config

    assert serve_config(build_parser().parse_args(["serve"])).loop_stall_report_ms == 0.0  # off
    toml = tmp_path / "onstage.toml"
    toml.write_text("[server]\nloop_stall_report_ms = 100\n")
    assert (
        serve_config(build_parser().parse_args(["serve", "--config", str(toml)])).loop_stall_report_ms == 100
    )
    toml.write_text("[server]\nloop_stall_report_ms = -5\n")
    assert main(["serve", "--config", str(toml)]) == 2
    assert "loop_stall_report_ms" in capsys.readouterr().err
