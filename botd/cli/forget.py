"""``botd forget --channel <name> --user <id>``: the operator's side of the right to be
forgotten (``botd.forget``; which rows are a person's: ``botd.store.forgetting``).

It prints what it removed as counts per table (and files), never any content.

On SQLite it takes the state dir's lock, as ``botd run`` does, so it runs only while botd
is stopped there: a running botd holds the person's conversations in memory and would write
them again (one line says so, exit 2; the person can also send ``/forget me``). On
PostgreSQL it runs beside the nodes, in one transaction (``botd.store.postgres.forget``
says what a conversation running at that moment may still write), without migrating the
database (``StoreBackend.open_beside``); the files it removes are those of this node's
state dir.

The channel must be one the config has (a section name under ``channels:``); the user id is
the platform's, as ``/whoami`` shows it. Their direct chats are found by the messages the
inbox still holds from them (a week), and, where the platform spells a direct chat from the
user id (Telegram, Discord), by that key; ``--conversation`` names one more (a Slack DM
older than that week: its key, as ``/whoami`` there shows it).
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..config import BotdConfig
    from ..store import Forgotten

__all__ = ["add_parser", "forget", "report"]


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add ``forget`` to ``commands`` (argparse subparsers)."""
    parser = commands.add_parser(
        "forget",
        parents=[common],
        help="remove everything botd keeps about one user of a channel",
        description=(
            "Remove a user's rows from every table of the store (their direct chats, their "
            "messages in groups, their memories, pairing) and their conversations' files in "
            "the state dir; print the counts removed. On SQLite botd must be stopped."
        ),
    )
    parser.add_argument(
        "--config", default=None, metavar="FILE", help="the botd.yaml (default: as run)"
    )
    parser.add_argument(
        "--channel", required=True, metavar="NAME", help="the channel's section name"
    )
    parser.add_argument(
        "--user", required=True, metavar="ID", help="the user's platform id (/whoami shows it)"
    )
    parser.add_argument(
        "--conversation",
        action="append",
        default=[],
        metavar="KEY",
        help="a conversation of theirs botd holds no message of any more (a direct chat "
        "whose id does not name the user, quiet for longer than the inbox's week): its key, "
        "as /whoami in it shows; repeatable",
    )


def report(forgotten: Forgotten) -> list[str]:
    """The lines printed: counts per table and file kind, never content."""
    lines = [f"  {name}: {count}" for name, count in sorted(forgotten.removed.items())]
    if forgotten.redacted:
        lines.append(f"  group turns redacted: {forgotten.redacted}")
    return lines or ["  nothing was kept"]


def forget(
    args: argparse.Namespace,
    *,
    say: Callable[..., None],
    register: Callable[[BotdConfig], BotdConfig],
) -> int:
    """Run ``botd forget``; ``say`` prints errors (masked), ``register`` registers a loaded
    config's secrets for masking."""
    import os

    from ..config import ConfigError, default_config, load_config

    try:
        if args.config:
            config = load_config(Path(args.config), unset_ok=True)
        else:
            config = default_config(os.environ)
    except ConfigError as exc:
        say(exc)
        return 2
    except OSError as exc:
        say(f"botd: cannot read {args.config}: {exc}")
        return 2
    register(config)
    channels = config.channels.sections()
    if args.channel not in channels:
        say(
            f"botd: unknown channel {args.channel!r}; configured: "
            f"{', '.join(sorted(channels)) or 'none'}"
        )
        return 2
    user = args.user.strip()
    if not user:
        say("botd: --user must be a user id (as /whoami shows it)")
        return 2
    named = frozenset(args.conversation)
    stray = sorted(key for key in named if not key.startswith(f"{args.channel}:"))
    if stray:
        say(f"botd: --conversation {stray[0]!r} is not a conversation of {args.channel}")
        return 2
    try:
        return asyncio.run(_forget(config, args.channel, user, named, say))
    except KeyboardInterrupt:
        return 130


async def _forget(
    config: BotdConfig,
    channel: str,
    user: str,
    named: frozenset[str],
    say: Callable[..., None],
) -> int:
    from ..channels.registry import platform_specs
    from ..config.source import unset_variable
    from ..forget import dm_spelling, forget_person
    from ..ops.statelock import StateDirError, StateDirInUse, StateLock
    from ..store import Person, StoreError
    from ..store.backends import store_backend

    backend = store_backend(config.store)
    state_dir = Path(config.state_dir).absolute()
    lock: StateLock | None = None
    if backend.cluster:
        unset = unset_variable(config.store.dsn or "")
        if unset:
            say(f"botd: store.dsn: ${{{unset}}} is not set in this shell: set it as botd's is")
            return 2
    else:
        lock = StateLock(state_dir)
        try:
            lock.acquire()
        except StateDirInUse as exc:
            holder = f"pid {exc.pid}" if exc.pid is not None else "pid unknown"
            say(
                f"botd: state dir {state_dir} is in use by a running botd ({holder}): stop it "
                "first (or the user can send /forget me in the chat)"
            )
            return 2
        except StateDirError as exc:
            say(f"botd: {exc}")
            return 2
    try:
        keys, chats = dm_spelling(lambda: platform_specs(config.channels))(channel, user)
        store = await backend.open_beside(config)
        try:
            person = Person(channel, user, keys | named, chats)
            forgotten = await forget_person(store, person, state_dir, config.agent.workspace)
            where = backend.where(config) if backend.cluster else str(state_dir)
        finally:
            await store.aclose()
    except StoreError as exc:
        say(f"botd: {exc}")
        return 2
    except OSError as exc:
        say(f"botd: cannot remove a file in {state_dir}: {exc.strerror or exc}")
        return 2
    finally:
        if lock is not None:
            lock.release()
    print(f"forgot user {user} on {channel} ({where}):")
    print("\n".join(report(forgotten)))
    return 0
