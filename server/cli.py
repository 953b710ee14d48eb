"""The ``onstage`` command line: one subcommand per thing a user can do from a terminal."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

if TYPE_CHECKING:
    _Subcommands = argparse._SubParsersAction[argparse.ArgumentParser]


def _add_listen(sub: _Subcommands) -> None:
    listen = sub.add_parser("listen", help="print what the character hears in a WAV file, as JSON lines")
    listen.add_argument("file", nargs="?", help="a WAV file (any rate, mono or stereo)")
    listen.add_argument("--demo", action="store_true", help="listen to a generated demo recording")
    listen.add_argument(
        "--levels", action="store_true", help="include the audio.level stream (50 per second)"
    )
    listen.add_argument("--no-transcripts", action="store_true", help="skip speech recognition")
    listen.add_argument("--no-sounds", action="store_true", help="skip sound classification")
    listen.set_defaults(run=_listen)


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
    heard = 0
    try:
        for event in listen_file(
            path, levels=args.levels, extra=hearing.listeners(stamper, threaded=False), stamper=stamper
        ):
            sys.stdout.buffer.write(encoder.encode(event) + b"\n")
            sys.stdout.flush()
            heard += 1
        if not heard:  # no output at all would look like a command that did nothing
            print(f"# nothing heard in {path}: no speech, sound onset or named sound", file=sys.stderr)
    except (BadInput, OSError) as exc:
        print(f"onstage listen: {exc}", file=sys.stderr)
        return 1
    finally:
        hearing.close()
    return 0


def _add_serve(sub: _Subcommands) -> None:
    from server import serve_cli

    serve = sub.add_parser("serve", help="run the live session server and its browser page")
    serve_cli.add_arguments(serve)
    serve.set_defaults(run=serve_cli.run)


def _add_render(sub: _Subcommands) -> None:
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


def _render(args: argparse.Namespace) -> int:
    from streaming_model.render import DEMO, SCENE_DEMO, render
    from streaming_model.weights import WeightsError

    if Path(args.out).suffix.lower() not in (".webp", ".gif"):
        print("onstage render: write a .webp or .gif file", file=sys.stderr)
        return 2
    folder = Path(args.out).absolute().parent
    if not folder.is_dir() or not os.access(folder, os.W_OK):  # said before the render, not after it
        print(f"onstage render: cannot write in {folder}: no such folder, or not writable", file=sys.stderr)
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


def _add_eval(sub: _Subcommands) -> None:
    evaluate = sub.add_parser(
        "eval",
        help="is a configuration of the model within the noise floor of another? (scripted probes over seeds)",
        description="Run the scripted evaluation (every action, side turns, mouth against the voice, "
        "identity, motion, a long session for drift) on the same seeds for two configurations, and judge "
        "each probe metric: within the noise floor or not. Writes DIR/report.md with PNG plots and "
        "DIR/results.json. Options: steps=N (denoise steps), cache=write_time|naive, linears=auto|float|int8, "
        "precision=auto|bf16|fp32, cache_noise=X (a deliberately damaged cache), commit_pass=fused|apart "
        "(a chunk into the cache in the next chunk's pass, or in a pass of its own), codec=slim|full (the "
        "served decoder, or the full one that taught it), upsample=parity|transposed, kernels=auto|torch|onednn "
        "(what the transformer's attention and MLP run on), dit=PATH and codec=PATH (other weights: a trained "
        "candidate against the shipped ones).",
    )
    evaluate.add_argument("--baseline", nargs="*", default=[], metavar="KEY=VALUE", help="default: as served")
    evaluate.add_argument(
        "--candidate", nargs="*", default=[], metavar="KEY=VALUE", help="default: as served"
    )
    evaluate.add_argument("--seeds", type=int, default=20, help="seeds per configuration (default 20)")
    evaluate.add_argument(
        "--order",
        choices=("shuffled", "fixed"),
        default="shuffled",
        help="the held actions in an order drawn from each seed (default), or in one order on every seed",
    )
    evaluate.add_argument(
        "--identity",
        type=int,
        help="run only seeds that draw this character (0-5): --seeds of them (default: seeds 0..N-1, every "
        "character in turn)",
    )
    evaluate.add_argument(
        "--actions",
        nargs="+",
        metavar="ACTION",
        help="hold only these actions (default: every one), e.g. a context to look at: "
        "--actions walk_right sit wave --order fixed",
    )
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


def _eval(args: argparse.Namespace) -> int:
    import shlex

    from streaming_model.eval.compare import RESULTS, rebuild, run_eval
    from streaming_model.eval.options import Script, parse_actions, parse_options
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
            given += ("--order", args.order, *(("--actions", *args.actions) if args.actions else ()))
            given += ("--identity", str(args.identity)) if args.identity is not None else ()
            script = Script(order=args.order)
            if args.actions:
                script = msgspec.structs.replace(script, actions=parse_actions(args.actions))
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
                script=script,
                identity=args.identity,
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


def _add_token(sub: _Subcommands) -> None:
    token = sub.add_parser("token", help="make a client token for a server started with a token secret")
    token.add_argument("--secret", help="the server's token secret (or ONSTAGE_TOKEN_SECRET)")
    token.add_argument("--ttl", type=float, default=3600.0, help="seconds the token stays valid")
    token.set_defaults(run=_token)


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


def _add_client(sub: _Subcommands) -> None:
    from server import client_cli

    client = sub.add_parser("client", help="stream a WAV and timed inputs to a server; save the call")
    client_cli.add_arguments(client)
    client.set_defaults(run=client_cli.run)


def build_parser() -> argparse.ArgumentParser:
    """The ``onstage`` parser; each subcommand's arguments carry its handler as ``run``."""
    parser = argparse.ArgumentParser(prog="onstage", description="A live character you talk with.")
    sub = parser.add_subparsers(dest="command", required=True)
    # In this order in ``onstage --help``.
    for add in (_add_listen, _add_serve, _add_render, _add_eval, _add_token, _add_client):
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``onstage`` console script."""
    args = build_parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
