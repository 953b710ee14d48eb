"""``onstage serve``: its flags, the server config they make, and the server, run until a signal stops it."""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:
    from events.hearing import Hearing
    from events.transcriber import TranscriberConfig
    from server.config import ServerConfig
    from server.sessions import SessionFactory
    from server.voice import Voice
    from streaming_model.backend import Backend
    from streaming_model.pool import WorkerPool


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``onstage serve`` (the subcommand's parser is made by ``server.cli``)."""
    parser.add_argument("--config", type=Path, help="a TOML file ([server] and [director] tables)")
    parser.add_argument("--host", help="interface to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port (default 8765)")
    parser.add_argument(
        "--token-secret", help="require tokens signed with this secret (or ONSTAGE_TOKEN_SECRET)"
    )
    parser.add_argument(
        "--max-sessions",
        type=int,
        help="sessions served at once, at most (default 64: a ceiling; below it admission measures)",
    )
    parser.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="HOST",
        help="also answer requests whose Host header is HOST, e.g. stage.example.org or 10.0.0.5:8765"
        " (repeatable; loopback names and the bound host with the port always are)",
    )
    parser.add_argument(
        "--allowed-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="also let pages of ORIGIN, e.g. https://app.example.org, use the server (repeatable;"
        " the server's own page always may)",
    )
    parser.add_argument(
        "--sessions-per-token", type=int, help="live sessions one client token may hold at once (default 1)"
    )
    parser.add_argument("--story-db", help="an SQLite file for story checkpoints (kept across restarts)")
    parser.add_argument("--backend", help="the video model: tiny (the default, the trained model) or world")
    parser.add_argument(
        "--backend-option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an option of the backend, e.g. fps=16, chunk_frames=12, width=160, height=96 for world, "
        "steps=1, linears=int8 for tiny (repeatable)",
    )
    parser.add_argument(
        "--ice-address",
        action="append",
        default=[],
        metavar="IP",
        help="offer WebRTC ICE candidates on this address only, e.g. 127.0.0.1 for browsers on this machine"
        " (repeatable; default: every interface but loopback)",
    )
    parser.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="run the generators as Ray actors: 'local' starts Ray here, else a Ray cluster's address"
        " (its nodes declare onstage_slot resources; needs the ray extra)",
    )
    parser.add_argument("--no-webrtc", action="store_true", help="serve the WebSocket only (no /v1/rtc)")


def run(args: argparse.Namespace) -> int:
    """Run ``onstage serve`` with parsed arguments until SIGINT or SIGTERM; returns the exit status."""
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
    for name in ("generator_busy_max", "machine_busy_max"):
        if not 0.0 < (share := getattr(config.limits, name)) <= 1.0:
            raise ValueError(f"{name} must be in (0, 1], got {share}")
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


async def _serve_until_stopped(config: ServerConfig, config_path: Path | None) -> int:
    """Serve until SIGINT or SIGTERM, then close what was opened; 2 when the generators do not come up."""
    from server.app import OnstageServer
    from server.loop_watch import StallReporter
    from server.otel import TurnTelemetry

    print(f"onstage: loading the models (backend {config.backend})...", file=sys.stderr)
    factory = await _session_factory(config, config_path)
    if factory is None:
        return 2
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


async def _session_factory(config: ServerConfig, config_path: Path | None) -> SessionFactory | None:
    """The sessions' parts: the generators (here or on Ray), hearing, voice and the Director's config.

    None, said on stderr, when the generators do not come up."""
    from agent.director_config import load_config
    from events.ears import EarsConfig
    from events.hearing import Hearing
    from events.transcriber import TranscriberConfig, WhisperConfig
    from server.core.conductor import ConductorConfig
    from server.sessions import SessionDefaults, SessionFactory, server_turn
    from streaming_model.backends import open_backend
    from streaming_model.lanes import in_process
    from streaming_model.weights import WeightsError

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
        return None
    return await asyncio.to_thread(
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
        conductor=ConductorConfig(aligned=workers.batching, foresee=config.foresee),
    )


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
