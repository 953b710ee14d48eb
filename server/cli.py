"""The ``onstage`` command line: one subcommand per thing a user can do from a terminal."""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:
    from events.hearing import Hearing
    from events.transcriber import TranscriberConfig
    from server.config import ServerConfig
    from server.voice import Voice
    from streaming_model.backend import Backend
    from streaming_model.pool import WorkerPool


def _listen(args: argparse.Namespace) -> int:
    from events.ears import listen_file
    from events.errors import BadInput
    from events.hearing import Hearing
    from events.sound_classes import SoundClassConfig
    from events.stamp import Stamper
    from events.transcriber import TranscriberConfig

    if args.demo:
        from server.demo_audio import write_demo_wav

        path = write_demo_wav()
        print(f"# listening to a demo recording: {path}", file=sys.stderr)
    elif args.file is None:
        print("onstage listen: give a WAV file, or --demo", file=sys.stderr)
        return 2
    else:
        path = args.file
    hearing = Hearing(
        sounds=None if args.no_sounds else SoundClassConfig(),
        transcripts=None if args.no_transcripts else TranscriberConfig(),
    )
    stamper = Stamper("listen")
    encoder = msgspec.json.Encoder()
    try:
        for event in listen_file(
            path, levels=args.levels, extra=hearing.listeners(stamper, threaded=False), stamper=stamper
        ):
            sys.stdout.buffer.write(encoder.encode(event) + b"\n")
            sys.stdout.flush()
    except (BadInput, OSError) as exc:
        print(f"onstage listen: {exc}", file=sys.stderr)
        return 1
    finally:
        hearing.close()
    return 0


def _serve(args: argparse.Namespace) -> int:
    import uvloop

    try:
        config = serve_config(args)
    except ValueError as exc:
        print(f"onstage serve: {exc}", file=sys.stderr)
        return 2
    return uvloop.run(_serve_until_stopped(config, args.config))


def serve_config(args: argparse.Namespace) -> ServerConfig:
    """What ``onstage serve`` runs with: the config file's ``[server]`` table, the flags on top.

    ValueError (``ConfigFileError`` for the file) says what does not fit."""
    from server.config import load_server_config
    from streaming_model.backends import BACKENDS, parse_options

    config = load_server_config(args.config)
    changes: dict[str, Any] = {k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None}
    secret = args.token_secret or os.environ.get("ONSTAGE_TOKEN_SECRET")
    if secret:
        changes["token_secret"] = secret
    if args.story_db is not None:
        changes["story_db"] = args.story_db
    if args.backend is not None:
        changes["backend"] = args.backend
    if args.backend_option:
        changes["backend_options"] = {**config.backend_options, **parse_options(args.backend_option)}
    if args.ray is not None:
        changes["ray"] = msgspec.structs.replace(config.ray, address=args.ray)
    if args.max_sessions is not None:
        changes["limits"] = msgspec.structs.replace(config.limits, max_sessions=args.max_sessions)
    if args.sessions_per_token is not None and args.sessions_per_token < 1:
        raise ValueError("--sessions-per-token must be at least 1")
    changes["access"] = msgspec.structs.replace(
        config.access,
        allowed_hosts=(*config.access.allowed_hosts, *args.allowed_host),
        allowed_origins=(*config.access.allowed_origins, *args.allowed_origin),
        sessions_per_token=args.sessions_per_token or config.access.sessions_per_token,
    )
    if args.ice_address or args.no_webrtc:
        changes["rtc"] = msgspec.structs.replace(
            config.rtc,
            ice_addresses=(*config.rtc.ice_addresses, *args.ice_address),
            enabled=config.rtc.enabled and not args.no_webrtc,
        )
    config = msgspec.structs.replace(config, **changes)
    for address in config.rtc.ice_addresses:
        try:
            ipaddress.ip_address(address)
        except ValueError:
            raise ValueError(f"ICE address {address!r} is not an IP address") from None
    if config.lanes < 0 or config.max_batch < 1:
        raise ValueError(f"lanes must be >= 0 and max_batch >= 1, got {config.lanes} and {config.max_batch}")
    if not 0.0 < config.limits.generator_busy_max <= 1.0:
        raise ValueError(f"generator_busy_max must be in (0, 1], got {config.limits.generator_busy_max}")
    if config.backend not in BACKENDS:
        raise ValueError(f"unknown backend {config.backend!r}; known: {', '.join(BACKENDS)}")
    config.ray.check()
    if config.token_secret is None and not _is_loopback(config.host):
        raise ValueError("without a token secret the server binds loopback only")
    return config


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


async def _serve_until_stopped(config, config_path: Path | None) -> int:
    from agent.director_config import load_config
    from events.ears import EarsConfig
    from events.hearing import Hearing
    from events.transcriber import TranscriberConfig, WhisperConfig
    from server.app import OnstageServer
    from server.loop_watch import StallReporter
    from server.otel import TurnTelemetry
    from server.sessions import SessionDefaults, SessionFactory, server_turn
    from streaming_model.backends import open_backend
    from streaming_model.lanes import in_process
    from streaming_model.weights import WeightsError

    print(f"onstage: loading the models (backend {config.backend})...", file=sys.stderr)
    backend: Backend | None = None
    workers: WorkerPool | None = None
    transcripts = TranscriberConfig(whisper=WhisperConfig(window_s=config.whisper_window_s))
    voice: Voice | None = None
    hearing: Hearing | None = None
    try:
        if config.ray.address is None:
            backend = await asyncio.to_thread(open_backend, config.backend, dict(config.backend_options))
            workers = in_process(backend, config.batching, config.lanes, config.max_batch)
        else:
            workers = await _ray_slots(config)
            if config.ray.shared_encoders:
                voice, hearing = await _shared_encoders(config, transcripts)
    except (ValueError, WeightsError, RuntimeError) as exc:
        print(f"onstage serve: {exc}", file=sys.stderr)
        return 2
    factory = await asyncio.to_thread(
        SessionFactory,
        backend,
        director=load_config(config_path),
        defaults=SessionDefaults(character=config.character, plan=config.plan),
        story_db=config.story_db,
        workers=workers,
        voice=voice,
        hearing=hearing or Hearing(transcripts=transcripts, speculate=config.speculative_transcripts),
        ears=EarsConfig(turn=server_turn(config.punctuated_silence_ms)),
        speech=config.speech(),
    )
    telemetry = TurnTelemetry.from_env()
    server = OnstageServer(
        factory, config.limits, config.token_secret, config.access, telemetry=telemetry, rtc=config.rtc
    )
    await server.start(config.host, config.port)
    stalls = (
        StallReporter.start_on(config.loop_stall_report_ms / 1000)
        if config.loop_stall_report_ms > 0
        else None
    )
    print(
        f"onstage: serving on http://{config.host}:{server.port}/ - open that page in a browser",
        file=sys.stderr,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    print("onstage: stopping", file=sys.stderr)
    if stalls is not None:
        stalls.stop()
    await server.close()
    await factory.close()
    await factory.workers.close()
    if telemetry is not None:
        telemetry.shutdown()  # exports the spans still batched
    return 0


async def _ray_slots(config: ServerConfig) -> WorkerPool:
    """The cluster's generator slots (``server.cluster``); RuntimeError says what is missing."""
    try:
        from server.cluster.remote import RaySlots
    except ImportError:
        raise RuntimeError(
            "--ray needs Ray: install onstage's ray extra (pip install 'onstage[ray]')"
        ) from None
    print(f"onstage: bringing up generator slots on Ray ({config.ray.address})...", file=sys.stderr)
    return await asyncio.to_thread(RaySlots.connect, config.ray, config.backend, dict(config.backend_options))


async def _shared_encoders(config: ServerConfig, transcripts: TranscriberConfig) -> tuple[Voice, Hearing]:
    """The voice and hearing of a front end whose encoders are the cluster's shared actor."""
    from server.cluster.remote_encoders import shared_voice_and_hearing

    print("onstage: bringing up the shared encoders on Ray...", file=sys.stderr)
    return await asyncio.to_thread(
        shared_voice_and_hearing,
        transcripts,
        config.speculative_transcripts,
        timeout_s=config.ray.start_timeout_s,
    )


def _token(args: argparse.Namespace) -> int:
    from server.auth import make_token

    secret = args.secret or os.environ.get("ONSTAGE_TOKEN_SECRET")
    if not secret:
        print("onstage token: give --secret or set ONSTAGE_TOKEN_SECRET", file=sys.stderr)
        return 2
    try:
        print(make_token(secret, args.ttl))
    except ValueError as exc:
        print(f"onstage token: {exc}", file=sys.stderr)
        return 2
    return 0


def _render(args: argparse.Namespace) -> int:
    from streaming_model.render import DEMO, SCENE_DEMO, render
    from streaming_model.weights import WeightsError

    if Path(args.out).suffix.lower() not in (".webp", ".gif"):
        print("onstage render: write a .webp or .gif file", file=sys.stderr)
        return 2
    script = SCENE_DEMO if args.scene else DEMO
    # The shipped model draws no scene yet: the scene tour shows the procedural world unless told otherwise.
    source = args.source or ("world" if args.scene else "model")
    try:
        path = render(script, args.out, seed=args.seed, identity=args.identity, source=source)
    except (WeightsError, ValueError, OSError) as exc:
        print(f"onstage render: {exc}", file=sys.stderr)
        return 1
    seconds = sum(beat.seconds for beat in script)
    print(f"onstage: wrote {path} ({seconds:.1f} s: {', '.join(beat.action for beat in script)})")
    return 0


def _eval(args: argparse.Namespace) -> int:
    import shlex

    import msgspec

    from streaming_model.eval.compare import RESULTS, rebuild, run_eval
    from streaming_model.eval.options import parse_options
    from streaming_model.eval.report import verdict_table
    from streaming_model.eval.verdict import Rule
    from streaming_model.weights import WeightsError

    out = Path(args.out)
    try:
        rule = Rule(
            **{k: v for k, v in (("margin", args.margin), ("confidence", args.confidence)) if v is not None}
        )
        if args.rebuild:
            rejudge = args.margin is not None or args.confidence is not None
            results, judged = rebuild(out, rule if rejudge else None)
        else:
            baseline, candidate = parse_options(args.baseline), parse_options(args.candidate)
            given = ("--baseline", *args.baseline, "--candidate", *args.candidate, "--seeds", str(args.seeds))
            command = shlex.join(("onstage", "eval", *given, "--out", str(out)))
            results, judged = run_eval(
                baseline,
                candidate,
                args.seeds,
                out,
                jobs=args.jobs,
                rule=rule,
                command=command,
                progress=lambda line: print(f"onstage eval: {line}", file=sys.stderr, flush=True),
            )
    except (msgspec.DecodeError, msgspec.ValidationError):  # before ValueError, which they are
        print(f"onstage eval: {out / RESULTS} is not the results of an onstage eval run", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"onstage eval: {exc}", file=sys.stderr)
        return 2
    except FileNotFoundError:
        print(f"onstage eval: {out / RESULTS} does not exist: run the evaluation first", file=sys.stderr)
        return 2
    except (WeightsError, OSError) as exc:
        print(f"onstage eval: {exc}", file=sys.stderr)
        return 1
    print(verdict_table(judged, results.rule.confidence))
    print(f"onstage: wrote {out / 'report.md'}", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="onstage", description="A live character you talk with.")
    sub = parser.add_subparsers(dest="command", required=True)

    listen = sub.add_parser("listen", help="print what the character hears in a WAV file, as JSON lines")
    listen.add_argument("file", nargs="?", help="a WAV file (any rate, mono or stereo)")
    listen.add_argument("--demo", action="store_true", help="listen to a generated demo recording")
    listen.add_argument(
        "--levels", action="store_true", help="include the audio.level stream (50 per second)"
    )
    listen.add_argument("--no-transcripts", action="store_true", help="skip speech recognition")
    listen.add_argument("--no-sounds", action="store_true", help="skip sound classification")
    listen.set_defaults(run=_listen)

    serve = sub.add_parser("serve", help="run the live session server and its browser page")
    serve.add_argument("--config", type=Path, help="a TOML file ([server] and [director] tables)")
    serve.add_argument("--host", help="interface to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default 8765)")
    serve.add_argument(
        "--token-secret", help="require tokens signed with this secret (or ONSTAGE_TOKEN_SECRET)"
    )
    serve.add_argument("--max-sessions", type=int, help="sessions served at once (default 4)")
    serve.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="HOST",
        help="also answer requests whose Host header is HOST, e.g. stage.example.org or 10.0.0.5:8765"
        " (repeatable; loopback names and the bound host with the port always are)",
    )
    serve.add_argument(
        "--allowed-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="also let pages of ORIGIN, e.g. https://app.example.org, use the server (repeatable;"
        " the server's own page always may)",
    )
    serve.add_argument(
        "--sessions-per-token", type=int, help="live sessions one client token may hold at once (default 1)"
    )
    serve.add_argument("--story-db", help="an SQLite file for story checkpoints (kept across restarts)")
    serve.add_argument("--backend", help="the video model: tiny (the default, the trained model) or world")
    serve.add_argument(
        "--backend-option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an option of the backend, e.g. fps=16, chunk_frames=12, width=160, height=96 for world, "
        "steps=1, linears=int8 for tiny (repeatable)",
    )
    serve.add_argument(
        "--ice-address",
        action="append",
        default=[],
        metavar="IP",
        help="offer WebRTC ICE candidates on this address only, e.g. 127.0.0.1 for browsers on this machine"
        " (repeatable; default: every interface but loopback)",
    )
    serve.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="run the generators as Ray actors: 'local' starts Ray here, else a Ray cluster's address"
        " (its nodes declare onstage_slot resources; needs the ray extra)",
    )
    serve.add_argument("--no-webrtc", action="store_true", help="serve the WebSocket only (no /v1/rtc)")
    serve.set_defaults(run=_serve)

    render = sub.add_parser("render", help="render a short scripted sequence of actions to a video file")
    render.add_argument("out", nargs="?", default="onstage.webp", help="an animated .webp or .gif")
    render.add_argument("--seed", type=int, default=0)
    render.add_argument("--identity", type=int, default=0, help="which character (0-5)")
    render.add_argument(
        "--source",
        choices=("model", "world", "both"),
        default=None,
        help="the default model (the default), the procedural truth, or both side by side",
    )
    render.add_argument(
        "--scene",
        action="store_true",
        help="a tour of the scene (ball, dusk, rainy night, lamp, door), from the procedural world by default",
    )
    render.set_defaults(run=_render)

    evaluate = sub.add_parser(
        "eval",
        help="is a configuration of the model within the noise floor of another? (scripted probes over seeds)",
        description="Run the scripted evaluation (every action, side turns, mouth against the voice, "
        "identity, motion, a long session for drift) on the same seeds for two configurations, and judge "
        "each probe metric: within the noise floor or not. Writes DIR/report.md with PNG plots and "
        "DIR/results.json. Options: steps=N (denoise steps), cache=write_time|naive, linears=float|int8, "
        "precision=auto|bf16|fp32, cache_noise=X (a deliberately damaged cache), commit_pass=fused|apart "
        "(a chunk into the cache in the next chunk's pass, or in a pass of its own), dit=PATH and "
        "codec=PATH (other weights: a trained candidate against the shipped ones).",
    )
    evaluate.add_argument("--baseline", nargs="*", default=[], metavar="KEY=VALUE", help="default: as served")
    evaluate.add_argument(
        "--candidate", nargs="*", default=[], metavar="KEY=VALUE", help="default: as served"
    )
    evaluate.add_argument("--seeds", type=int, default=20, help="seeds per configuration (default 20)")
    evaluate.add_argument("--out", required=True, help="the report's folder (created if missing)")
    evaluate.add_argument(
        "--jobs", type=int, default=len(os.sched_getaffinity(0)), help="worker processes (default: the cores)"
    )
    evaluate.add_argument("--margin", type=float, help="noise floor: K x the baseline's seed spread (1.0)")
    evaluate.add_argument("--confidence", type=float, help="of the difference's interval (0.95)")
    evaluate.add_argument(
        "--rebuild", action="store_true", help="rewrite DIR's report from its results.json, running nothing"
    )
    evaluate.set_defaults(run=_eval)

    token = sub.add_parser("token", help="make a client token for a server started with a token secret")
    token.add_argument("--secret", help="the server's token secret (or ONSTAGE_TOKEN_SECRET)")
    token.add_argument("--ttl", type=float, default=3600.0, help="seconds the token stays valid")
    token.set_defaults(run=_token)

    from server import client_cli

    client = sub.add_parser("client", help="stream a WAV and timed inputs to a server; save the call")
    client_cli.add_arguments(client)
    client.set_defaults(run=client_cli.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``onstage`` console script."""
    args = build_parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
