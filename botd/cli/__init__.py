"""The ``botd`` command: ``botd check | doctor | init | run | acp | status | pairing | forget |
replay | unit | version`` (and ``--version``; ``python -m botd`` is the same command).

Every error it prints goes through the log masking, and every secret of a loaded config is
registered for that masking before anything runs. A startup failure is one line ``botd:
why`` and exit status 2; ``--debug`` (before or after the command) logs at DEBUG whatever the
config says and shows the failure's traceback too, masked like everything else.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

from ..ops.logging import add_secrets, install_exception_hooks, json_logging, mask_secrets
from .init import DROP_INS

if TYPE_CHECKING:
    from ..config import BotdConfig


def _positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {value}")
    return number


def _positive_float(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {value!r}") from None
    if not number > 0 or number == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds: {value}")
    return number


def _say(*parts: object, file: TextIO | None = None) -> None:
    """Print like ``print``, secrets masked (stderr unless ``file``)."""
    print(mask_secrets(" ".join(str(part) for part in parts)), file=file or sys.stderr)


def _registered(config: BotdConfig) -> BotdConfig:
    """``config``, its secrets registered for masking first."""
    from ..config import secret_values

    add_secrets(secret_values(config))
    return config


_DEBUG_HELP = "log at DEBUG and show tracebacks of startup failures (secrets stay masked)"
_ALLOW_EMPTY_HELP = "accept a config that enables no channel (botd then answers no one)"


def version() -> str:
    """botd's version: ``botd.__version__``, which a build also writes into the metadata."""
    from .. import __version__

    return __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="botd", description="LLM agents in chat.")
    parser.add_argument("--debug", action="store_true", help=_DEBUG_HELP)
    parser.add_argument(
        "--version", action="version", version=f"botd {version()}", help="print the version"
    )
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
    replay.add_argument(
        "--block-break",
        choices=("text_end", "message_end"),
        default=None,
        help="where a block may end: at a text segment's end, or only at the message's end",
    )
    replay.add_argument(
        "--chunk-min", type=_positive_int, default=None, metavar="N", help="smallest block, chars"
    )
    replay.add_argument(
        "--chunk-max", type=_positive_int, default=None, metavar="N", help="largest block, chars"
    )
    replay.add_argument(
        "--break-preference",
        choices=("paragraph", "newline", "sentence"),
        default=None,
        help="where a long block is preferably cut",
    )
    replay.add_argument("--no-chunking", action="store_true", help="one block per flush")
    replay.add_argument(
        "--reasoning",
        choices=("off", "on", "stream"),
        default="off",
        help="show the model's reasoning: not at all, as a block, or streamed",
    )
    replay.add_argument(
        "--enforce-final-tag",
        action="store_true",
        help="show only text inside <final> tags",
    )
    replay.add_argument(
        "--no-block-replies", action="store_true", help="emit no blocks, only the final replies"
    )
    replay.add_argument(
        "--partial-replies", action="store_true", help="emit the growing text as partial replies"
    )
    replay.add_argument(
        "--current-message-id",
        default=None,
        metavar="ID",
        help="the id of the message being answered (for reply-to tags)",
    )
    replay.add_argument(
        "--config",
        default=None,
        metavar="botd.yaml",
        help="take the block-streaming settings from this config",
    )

    check = commands.add_parser(
        "check",
        parents=[common],
        help="validate a config file without starting anything",
        description="Validate a botd config file; exit 0 when it is usable, 2 when not. "
        "What is usable but likely not meant (a placeholder id from the reference config, a "
        "secret written in a file others may read) is a ⚠ line on stderr.",
    )
    check.add_argument("--config", required=True, metavar="FILE", help="the YAML config file")
    check.add_argument("--allow-empty", action="store_true", help=_ALLOW_EMPTY_HELP)

    doctor = commands.add_parser(
        "doctor",
        parents=[common],
        help="check the config, then probe each channel, the model API and the state dir",
        description="Check the config like botd check, then probe every credential live and "
        "the state dir; one line per check with what to do: ✓ passed, ⚠ works but most likely "
        "not as meant, ✗ failed. Exit 0 when none fails, 1 when one fails (or, with --strict, "
        "warns), 2 when the config is invalid.",
    )
    doctor.add_argument(
        "--strict", action="store_true", help="a warning (⚠) fails too: exit 1 on warnings"
    )
    doctor.add_argument(
        "--json",
        action="store_true",
        help="print one JSON document: each check's name, status (ok, warn, fail) and detail",
    )
    doctor.add_argument(
        "--config", default=None, metavar="FILE", help="the YAML config file (default: as run)"
    )
    doctor.add_argument(
        "--timeout",
        type=_positive_float,
        default=10.0,
        metavar="SECONDS",
        help="how long each request may take before it counts as unreachable (default 10)",
    )

    init = commands.add_parser(
        "init",
        parents=[common],
        help="write a starting config by asking a few questions (or the full reference)",
        description="Ask for the platform, the names of the variables holding its secrets, "
        "the DM policy and the model provider, and write a starting config; with --example, "
        "write the full reference of every key instead, without questions. An existing "
        "file is never overwritten (exit 1).",
    )
    init.add_argument(
        "path", nargs="?", default="botd.yaml", metavar="FILE", help="where (default botd.yaml)"
    )
    init.add_argument(
        "--example",
        action="store_true",
        help="write the full config reference (every key, explained) instead of asking",
    )

    unit = commands.add_parser(
        "unit",
        help="print the systemd unit botd ships (hardened, Type=notify)",
        description="Print the systemd unit file this botd ships, for "
        "/etc/systemd/system/botd.service; its ExecStart runs /opt/botd/.venv/bin/botd.",
    )
    unit.add_argument(
        "--drop-in",
        choices=sorted(DROP_INS),
        help="print this drop-in instead (mcp-node: MCP servers on Node.js need "
        "MemoryDenyWriteExecute off; exec: the exec tool's bubblewrap needs user namespaces), "
        "for /etc/systemd/system/botd.service.d/NAME.conf",
    )

    run = commands.add_parser(
        "run",
        parents=[common],
        help="run the daemon (without --config: a console chat, offline unless ANTHROPIC_API_KEY)",
        description=(
            "Run botd: connect the configured channels, answer messages, run scheduled jobs "
            "until stopped (SIGTERM or Ctrl-C). Without --config it chats on the console, "
            "with Anthropic when ANTHROPIC_API_KEY is set and a scripted model otherwise. "
            "Exit status 2: the config or the state dir is unusable."
        ),
    )
    run.add_argument("--config", default=None, metavar="FILE", help="the botd.yaml to run")
    run.add_argument("--allow-empty", action="store_true", help=_ALLOW_EMPTY_HELP)

    acp = commands.add_parser(
        "acp",
        parents=[common],
        help="be an editor's ACP agent on stdio (Zed's agent_servers), through the daemon",
        description=(
            "Speak the Agent Client Protocol on stdin/stdout for an editor: bridged to the ACP "
            "socket of the daemon running on the config's state dir (channels.acp), or, with "
            "none running, running that daemon here until the editor closes stdin. Logs go "
            "to stderr. Without --config: the embedded default with the ACP channel."
        ),
    )
    acp.add_argument("--config", default=None, metavar="FILE", help="the botd.yaml to use")

    _add_status(commands, common)
    _add_pairing(commands, common)
    _add_forget(commands, common)

    commands.add_parser("version", help="print botd's version", description="Print botd's version.")
    return parser


def _add_status(commands: Any, common: argparse.ArgumentParser) -> None:
    """``botd status``: asks the running daemon (see status_cli)."""
    from .status import add_parser

    add_parser(commands, common)


def _add_pairing(commands: Any, common: argparse.ArgumentParser) -> None:
    """``botd pairing list|approve|revoke``: they read the state dir only (see pairing_cli)."""
    from .pairing import add_parser

    add_parser(commands, common)


def _add_forget(commands: Any, common: argparse.ArgumentParser) -> None:
    """``botd forget --channel --user`` (see forget_cli)."""
    from .forget import add_parser

    add_parser(commands, common)


def _check(path: str, allow_empty: bool) -> int:
    from pathlib import Path

    from ..config import ConfigError, load_config_with_warnings

    try:
        loaded = load_config_with_warnings(Path(path), allow_empty=allow_empty)
        config = _registered(loaded.config)
    except ConfigError as exc:
        _say(exc)
        count = len(exc.problems)
        _say(f"config invalid: {count} problem{'' if count == 1 else 's'}")
        return 2
    except OSError as exc:
        _say(f"botd: cannot read {path}: {exc}")
        return 2
    for warning in loaded.warnings:  # usable, but likely not what was meant
        _say(f"⚠ {warning.render(path)}")
    from ..agent.tools.registry import host_problems

    for problem in host_problems(config).values():  # botd runs; that tool refuses each call
        if problem is not None:
            _say(f"⚠ agent.tools: {problem}")
    _say(f"config OK: {config.summary()}", file=sys.stdout)
    return 0


def _run(config_path: str | None, debug: bool, allow_empty: bool = False) -> int:
    import asyncio
    import gc
    import logging
    import os
    import traceback
    from pathlib import Path

    # Start-up (botd's modules, the SDKs', their clients) makes several hundred thousand
    # objects that live as long as botd; the cycle collector would walk them again and
    # again while they are made (with the Anthropic SDK, hundreds of collections and a
    # sixth of start-up's CPU). It is off until the App collects once and freezes them
    # (botd.app.freeze_start_up, before any lease is held), then again once started
    # (botd.app.settled_heap), which turns it on.
    gc.disable()
    from ..app import App
    from ..config import ConfigError, default_config, load_config

    try:
        config = (
            load_config(Path(config_path), allow_empty=allow_empty)
            if config_path
            else default_config(os.environ)
        )
    except ConfigError as exc:
        _say(exc)
        return 2
    except OSError as exc:
        _say(f"botd: cannot read {config_path}: {exc}")
        return 2
    _registered(config)
    path = Path(config_path) if config_path else None
    daemon = App(config, config_path=path, debug=debug)
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


def _acp(config_path: str | None, debug: bool) -> int:
    """``botd acp`` (``botd.cli.acp``): the config loaded as ``botd run`` loads it."""
    import os
    from pathlib import Path

    from ..config import ConfigError, default_config, load_config
    from .acp import CHANNEL, acp_command

    try:
        config = (
            load_config(Path(config_path))
            if config_path
            else default_config(os.environ, channel=CHANNEL)
        )
    except ConfigError as exc:
        _say(exc)
        return 2
    except OSError as exc:
        _say(f"botd: cannot read {config_path}: {exc}")
        return 2
    _registered(config)
    try:
        return acp_command(
            config, Path(config_path) if config_path else None, debug, say=lambda line: _say(line)
        )
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if debug:
            import traceback

            _say("".join(traceback.format_exception(exc)).rstrip())
        _say(f"botd acp: {_one_line(exc)}")
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
        return _check(args.config, args.allow_empty)
    if args.command == "doctor":
        from pathlib import Path

        from ..ops.doctor import doctor

        config = Path(args.config) if args.config else None
        return doctor(
            config, timeout=args.timeout, debug=debug, strict=args.strict, as_json=args.json
        )
    if args.command == "init":
        from pathlib import Path

        from .init import init, write_example

        return write_example(Path(args.path)) if args.example else init(Path(args.path))
    if args.command == "unit":
        from .init import print_unit

        return print_unit(drop_in=args.drop_in)
    if args.command == "run":
        return _run(args.config, debug, args.allow_empty)
    if args.command == "acp":
        return _acp(args.config, debug)
    if args.command == "status":
        from .status import status

        return status(args, say=_say, register=_registered)
    if args.command == "pairing":
        from .pairing import pairing

        return pairing(args, say=_say, register=_registered)
    if args.command == "forget":
        from .forget import forget

        return forget(args, say=_say, register=_registered)
    if args.command == "version":
        print(f"botd {version()}")
        return 0
    parser.error(f"unknown command {args.command}")
    return 2
