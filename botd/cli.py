"""The ``botd`` command: ``botd check | run | pairing | replay | version``.

Every error it prints goes through the log masking, and every secret of a loaded config is
registered for that masking before anything runs. A startup failure is one line ``botd:
why`` and exit status 2; ``--debug`` (before or after the command) logs at DEBUG whatever the
config says and shows the failure's traceback too, masked like everything else.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, TextIO

from . import __version__
from .logging import add_secrets, install_exception_hooks, json_logging, mask_secrets

if TYPE_CHECKING:
    from .config import BotdConfig


def _positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {value}")
    return number


def _say(*parts: object, file: TextIO | None = None) -> None:
    """Print like ``print``, secrets masked (stderr unless ``file``)."""
    print(mask_secrets(" ".join(str(part) for part in parts)), file=file or sys.stderr)


def _registered(config: BotdConfig) -> BotdConfig:
    """``config``, its secrets registered for masking first."""
    from .config import secret_values

    add_secrets(secret_values(config))
    return config


_DEBUG_HELP = "log at DEBUG and show tracebacks of startup failures (secrets stay masked)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="botd", description="LLM agents in chat.")
    parser.add_argument("--debug", action="store_true", help=_DEBUG_HELP)
    # Also accepted after the command; SUPPRESS keeps a global --debug from being reset.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=_DEBUG_HELP)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    replay = commands.add_parser(
        "replay",
        parents=[common],
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
        parents=[common],
        help="validate a config file without starting anything",
        description="Validate a botd config file; exit 0 when it is usable, 2 when not.",
    )
    check.add_argument("--config", required=True, metavar="FILE", help="the YAML config file")

    run = commands.add_parser(
        "run",
        parents=[common],
        help="run the daemon (without --config: a console chat, offline unless ANTHROPIC_API_KEY)",
    )
    run.add_argument("--config", default=None, metavar="FILE", help="the botd.yaml to run")

    pairing = commands.add_parser(
        "pairing",
        parents=[common],
        help="list or approve the pairing codes of people who DM the bot",
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
        config = _registered(load_config(Path(path)))
    except ConfigError as exc:
        _say(exc)
        count = len(exc.problems)
        _say(f"config invalid: {count} problem{'' if count == 1 else 's'}")
        return 2
    except OSError as exc:
        _say(f"botd: cannot read {path}: {exc}")
        return 2
    _say(f"config OK: {config.summary()}", file=sys.stdout)
    return 0


def _pairing(action: str, channel: str | None, code: str | None, config_path: str | None) -> int:
    import os
    from pathlib import Path

    from .config import ConfigError, default_config, load_config
    from .router import PairingBook

    try:
        config = load_config(Path(config_path)) if config_path else default_config(os.environ)
    except ConfigError as exc:
        _say(exc)
        return 2
    _registered(config)
    book = PairingBook(Path(config.state_dir) / "pairing.json")
    if action == "list":
        waiting = book.pending()
        for pending_code, pending_channel, sender in waiting:
            print(f"{pending_code}  {pending_channel}  {sender}")
        if not waiting:
            print("no pairing codes waiting")
        return 0
    if not channel or not code:
        _say("usage: botd pairing approve CHANNEL CODE")
        return 2
    admitted = book.approve(channel, code)
    if admitted is None:
        _say(f"no pending code {code!r} on {channel} (expired after an hour?)")
        return 1
    print(f"approved {admitted} on {channel}")
    return 0


def _run(config_path: str | None, debug: bool) -> int:
    import asyncio
    import logging
    import os
    import traceback
    from pathlib import Path

    from .config import ConfigError, default_config, load_config
    from .daemon import Daemon

    try:
        config = load_config(Path(config_path)) if config_path else default_config(os.environ)
    except ConfigError as exc:
        _say(exc)
        return 2
    except OSError as exc:
        _say(f"botd: cannot read {config_path}: {exc}")
        return 2
    _registered(config)
    path = Path(config_path) if config_path else None
    daemon = Daemon(config, config_path=path, debug=debug)
    try:
        return asyncio.run(daemon.run())
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        # Cannot start (a missing SDK, a state dir in use, a database botd cannot use; a
        # channel that fails is no such failure: it is down and retried while the rest run):
        # one line that names the cause, no
        # traceback unless --debug. Under JSON logs the line is a JSON record like the rest.
        # A failure after start-up is a bug: its traceback is always logged (masked).
        line = f"botd: {_one_line(exc)}"
        if json_logging() or daemon.started:
            show = debug or daemon.started
            logging.getLogger("botd").critical(line, exc_info=exc if show else None)
            return 2
        if debug:
            _say("".join(traceback.format_exception(exc)).rstrip())
        _say(line)
        return 2


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if text else type(exc).__name__


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    debug = bool(getattr(args, "debug", False))
    if args.command != "replay":  # replay reports its own errors, line by line
        install_exception_hooks()
    if args.command == "replay":
        from .replay import main_stdio

        return main_stdio(args)
    if args.command == "check":
        return _check(args.config)
    if args.command == "run":
        return _run(args.config, debug)
    if args.command == "pairing":
        return _pairing(args.action, args.channel, args.code, args.config)
    if args.command == "version":
        print(f"botd {__version__}")
        return 0
    parser.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
