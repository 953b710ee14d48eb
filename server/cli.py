"""The ``onstage`` command line: one subcommand per thing a user can do from a terminal."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import msgspec


def _listen(args: argparse.Namespace) -> int:
    from events.ears import listen_file
    from events.vocabulary import AudioLevel

    if args.demo:
        from server.demo_audio import write_demo_wav

        path = write_demo_wav()
        print(f"# listening to a demo recording: {path}", file=sys.stderr)
    elif args.file is None:
        print("onstage listen: give a WAV file, or --demo", file=sys.stderr)
        return 2
    else:
        path = args.file
    encoder = msgspec.json.Encoder()
    try:
        for event in listen_file(path, transcribe=not args.no_transcripts, classify=not args.no_sounds):
            if isinstance(event, AudioLevel) and not args.levels:
                continue
            sys.stdout.buffer.write(encoder.encode(event) + b"\n")
            sys.stdout.flush()
    except (OSError, ValueError) as exc:
        print(f"onstage listen: {exc}", file=sys.stderr)
        return 1
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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``onstage`` console script."""
    args = build_parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
