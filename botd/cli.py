"""The ``botd`` command: ``botd check | replay | version``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from . import __version__


def _positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {value}")
    return number


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="botd", description="LLM agents in chat.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    replay = commands.add_parser(
        "replay",
        help="feed a recorded run's events to the subscriber and print what it emits",
        description="Replay agent events (JSONL, one event per line) through the subscriber.",
    )
    replay.add_argument("events", metavar="EVENTS.jsonl|-", help="the events file, or - for stdin")
    replay.add_argument("--block-break", choices=("text_end", "message_end"), default=None)
    replay.add_argument("--chunk-min", type=_positive_int, default=None, metavar="N")
    replay.add_argument("--chunk-max", type=_positive_int, default=None, metavar="N")
    replay.add_argument(
        "--break-preference", choices=("paragraph", "newline", "sentence"), default=None
    )
    replay.add_argument("--no-chunking", action="store_true", help="one block per flush")
    replay.add_argument("--reasoning", choices=("off", "on", "stream"), default="off")
    replay.add_argument("--enforce-final-tag", action="store_true")
    replay.add_argument("--no-block-replies", action="store_true")
    replay.add_argument("--partial-replies", action="store_true")
    replay.add_argument("--current-message-id", default=None, metavar="ID")
    replay.add_argument("--config", default=None, metavar="botd.yaml")

    check = commands.add_parser(
        "check",
        help="validate a config file without starting anything",
        description="Validate a botd config file; exit 0 when it is usable, 2 when not.",
    )
    check.add_argument("--config", required=True, metavar="FILE", help="the YAML config file")

    run = commands.add_parser(
        "run",
        help="run the daemon (without --config: a console chat, offline unless ANTHROPIC_API_KEY)",
    )
    run.add_argument("--config", default=None, metavar="FILE", help="the botd.yaml to run")

    pairing = commands.add_parser(
        "pairing", help="list or approve the pairing codes of people who DM the bot"
    )
    pairing.add_argument("action", choices=("list", "approve"))
    pairing.add_argument("channel", nargs="?", help="the channel, e.g. telegram (approve)")
    pairing.add_argument("code", nargs="?", help="the code the person was given (approve)")
    pairing.add_argument("--config", default=None, metavar="FILE", help="for its state_dir")

    commands.add_parser("version", help="print botd's version")
    return parser


def _check(path: str) -> int:
    from pathlib import Path

    from .config import ConfigError, load_config

    try:
        config = load_config(Path(path))
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        count = len(exc.problems)
        print(f"config invalid: {count} problem{'' if count == 1 else 's'}", file=sys.stderr)
        return 2
    print(f"config OK: {config.summary()}")
    return 0


def _pairing(action: str, channel: str | None, code: str | None, config_path: str | None) -> int:
    import os
    from pathlib import Path

    from .config import ConfigError, default_config, load_config
    from .router import PairingBook

    try:
        config = load_config(Path(config_path)) if config_path else default_config(os.environ)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    book = PairingBook(Path(config.state_dir) / "pairing.json")
    if action == "list":
        waiting = book.pending()
        for pending_code, pending_channel, sender in waiting:
            print(f"{pending_code}  {pending_channel}  {sender}")
        if not waiting:
            print("no pairing codes waiting")
        return 0
    if not channel or not code:
        print("usage: botd pairing approve CHANNEL CODE", file=sys.stderr)
        return 2
    admitted = book.approve(channel, code)
    if admitted is None:
        print(f"no pending code {code!r} on {channel} (expired after an hour?)", file=sys.stderr)
        return 1
    print(f"approved {admitted} on {channel}")
    return 0


def _run(config_path: str | None) -> int:
    import asyncio
    import os
    from pathlib import Path

    from .channels.registry import ChannelUnavailable
    from .config import ConfigError, default_config, load_config
    from .daemon import Daemon
    from .statelock import StateDirError
    from .store import StoreOpenError

    try:
        config = load_config(Path(config_path)) if config_path else default_config(os.environ)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    path = Path(config_path) if config_path else None
    try:
        return asyncio.run(Daemon(config, config_path=path).run())
    except (ChannelUnavailable, StateDirError, StoreOpenError) as exc:
        # Cannot start (a missing SDK, a state dir in use, a database botd cannot use):
        # one line that names the cause and the fix, no traceback.
        print(f"botd: {exc}", file=sys.stderr)
        return 2


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "replay":
        from .replay import main_stdio

        return main_stdio(args)
    if args.command == "check":
        return _check(args.config)
    if args.command == "run":
        return _run(args.config)
    if args.command == "pairing":
        return _pairing(args.action, args.channel, args.code, args.config)
    if args.command == "version":
        print(f"botd {__version__}")
        return 0
    parser.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
