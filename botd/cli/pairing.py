"""``botd pairing list | approve | revoke``: the admin's side of DM pairing.

Pairing lives where the store's backend keeps it (``StoreBackend.pairing``). On SQLite that
is ``pairing.json`` in the state dir, and the commands read and write it and nothing else,
so they work from a shell that lacks the daemon's secrets (they usually live in the unit's
EnvironmentFile): with ``--config`` the file is read with unset ``${VAR}``s left as
stand-ins (only ``state_dir`` must resolve; a relative one is taken from the config file's
directory, as ``botd run`` takes it), or ``--state-dir`` names the directory directly.
Each command names the state dir it read, and one that does not exist is an error (exit 2):
reading an empty list from the wrong directory would look like "nobody is waiting". A
running daemon sees an approval or a revocation at its next message, as it rereads the
file when it changed.

On PostgreSQL (``--config`` with ``store.backend: postgres``) the codes and approvals are in
the database every node reads, so ``store.dsn`` must resolve (an unset variable is said in
one line); the database is not migrated by the command (``StoreBackend.open_beside``), and
each node sees a change at its next message from a stranger. ``--state-dir`` of a running
node on PostgreSQL is refused, naming its config: a ``pairing.json`` there is read by no
node.

A channel name that is neither configured nor in the pairing file is its own error (exit
2), distinct from a code that is not pending or a sender that is not approved (exit 1).
Names come from strangers, so control characters in them are shown escaped.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..config import BotdConfig
    from ..store import Pairing
    from ..store.backends import StoreBackend

__all__ = ["add_parser", "format_age", "pairing"]


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add ``pairing`` and its three actions to ``commands`` (argparse subparsers)."""
    where = argparse.ArgumentParser(add_help=False, parents=[common])
    source = where.add_mutually_exclusive_group()
    source.add_argument(
        "--config",
        default=None,
        metavar="FILE",
        help="the botd.yaml, for its state_dir and channels (its secrets need not be set)",
    )
    source.add_argument(
        "--state-dir",
        default=None,
        metavar="DIR",
        help="the state directory itself, instead of --config",
    )
    pairing = commands.add_parser(
        "pairing",
        parents=[common],
        help="list, approve or revoke the people who DM the bot",
        description=(
            "Manage DM pairing: an unknown sender gets a one-time code, which an admin "
            "approves here. Reads only the state dir: no secrets are needed."
        ),
    )
    actions = pairing.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser(
        "list",
        parents=[where],
        help="show the codes waiting for approval and the approved senders",
        description="Show each waiting code (channel, sender id and name, age) and who is "
        "approved.",
    )
    listing.add_argument("--json", action="store_true", help="print one JSON object instead")
    approve = actions.add_parser(
        "approve",
        parents=[where],
        help="approve a waiting code: its sender may talk to the bot",
        description="Approve the pairing code a sender was given on a channel.",
    )
    approve.add_argument("channel", help="the channel the code was given on")
    approve.add_argument("code", help="the code the sender was given")
    revoke = actions.add_parser(
        "revoke",
        parents=[where],
        help="take back a sender's approval",
        description="Take back an approved sender's access; they get a new code next time.",
    )
    revoke.add_argument("channel", help="the channel, as `pairing list` shows it")
    revoke.add_argument("sender", help="the sender's id, as `pairing list` shows it")


def format_age(seconds: float) -> str:
    """``42s``, ``12m``, ``3h05m``: how long ago, at a glance."""
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def _shown(text: str | None) -> str:
    """Text from a stranger, safe for a terminal: control characters escaped."""
    if not text:
        return "-"
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def pairing(
    args: argparse.Namespace,
    *,
    say: Callable[..., None],
    register: Callable[[BotdConfig], BotdConfig],
) -> int:
    """Run ``botd pairing <action>``; ``say`` prints errors (masked), ``register`` registers
    a loaded config's secrets for masking."""
    import os

    from ..config import ConfigError, default_config, load_config
    from ..store.backends import store_backend
    from ..store.pairing import PairingFileError

    configured: set[str] | None = None
    if args.state_dir:
        state_dir = Path(args.state_dir).expanduser().absolute()
        origin = "--state-dir"
    else:
        try:
            if args.config:
                config = load_config(Path(args.config), unset_ok=True)
                configured = set(config.channels.sections())
            else:
                config = default_config(os.environ)
        except ConfigError as exc:
            say(exc)
            return 2
        register(config)
        backend = store_backend(config.store)
        if backend.cluster:
            return _in_database(config, backend, args, configured, say)
        state_dir = Path(config.state_dir).absolute()
        origin = f"state_dir of {args.config}" if args.config else "the default state_dir"
    if not state_dir.is_dir():
        what = "is not a directory" if state_dir.exists() else "does not exist"
        say(
            f"botd: state dir {state_dir} ({origin}) {what}: is it the state_dir botd runs "
            "with? (botd creates it when it first starts)"
        )
        return 2
    shared = _shared_store_config(state_dir)
    if shared is not None:
        say(
            f"botd: the botd on state dir {state_dir} keeps pairing in its database "
            f"(store.backend: postgres), not in pairing.json: use --config {shared}"
        )
        return 2
    try:
        return _act(args, state_dir, configured, say)
    except PairingFileError as exc:
        say(f"botd: {exc}")
        return 2
    except OSError as exc:  # the state dir cannot be written (approve, revoke)
        say(f"botd: cannot update {state_dir / 'pairing.json'}: {exc.strerror or exc}")
        return 2


def _shared_store_config(state_dir: Path) -> Path | None:
    """The config of the botd running on ``state_dir`` when its store is one the nodes share
    (its lock file names it: ``statelock.Holder``), else None."""
    from ..config import ConfigError, load_config
    from ..ops.statelock import holder_of
    from ..store.backends import store_backend

    holding = holder_of(state_dir)
    if holding is None or holding.config is None:
        return None
    try:
        config = load_config(holding.config, unset_ok=True)
    except (ConfigError, OSError):
        return None
    return holding.config if store_backend(config.store).cluster else None


def _in_database(
    config: BotdConfig,
    backend: StoreBackend,
    args: argparse.Namespace,
    configured: set[str] | None,
    say: Callable[..., None],
) -> int:
    """``botd pairing`` on a backend the nodes share (postgres): the codes and approvals
    every node reads, in the database."""
    from ..config.source import unset_variable
    from ..store import StoreError

    unset = unset_variable(config.store.dsn or "")
    if unset:
        say(
            f"botd: store.dsn: ${{{unset}}} is not set in this shell: pairing on PostgreSQL "
            "is kept in the database, so set it as botd's environment does"
        )
        return 2

    async def act() -> int:
        store = await backend.open_beside(config)
        try:
            place = ("database", backend.where(config))
            return await _act_on(backend.pairing(config, store), args, place, configured, say)
        finally:
            await store.aclose()

    try:
        return asyncio.run(act())
    except StoreError as exc:
        say(f"botd: {exc}")
        return 2


def _act(
    args: argparse.Namespace,
    state_dir: Path,
    configured: set[str] | None,
    say: Callable[..., None],
) -> int:
    from ..store.pairing import PairingFile

    return asyncio.run(
        _act_on(
            PairingFile(state_dir / "pairing.json"),
            args,
            ("state_dir", str(state_dir)),
            configured,
            say,
        )
    )


Place = tuple[str, str]
"""Where the pairing data is, as the JSON key and value: ``("state_dir", path)`` or
``("database", postgresql://user@host/db)``."""


async def _act_on(
    book: Pairing,
    args: argparse.Namespace,
    place: Place,
    configured: set[str] | None,
    say: Callable[..., None],
) -> int:
    where = f"{place[0].replace('_', ' ')} {place[1]}"
    if args.action == "list":
        return await _list(book, place, as_json=args.json)
    known = (configured or set()) | await book.channels()
    if configured is not None and args.channel not in known:
        say(f"unknown channel {args.channel!r}; configured: {', '.join(sorted(known)) or 'none'}")
        return 2
    if args.action == "approve":
        admitted = await book.approve(args.channel, args.code)
        if admitted is None:
            say(
                f"no pending code {args.code!r} on {args.channel} "
                f"(unknown, or expired after an hour; {where})"
            )
            return 1
        print(f"approved {admitted} on {args.channel} ({where})")
        return 0
    if not await book.revoke(args.channel, args.sender):
        say(f"{args.sender} is not approved on {args.channel} ({where})")
        return 1
    print(f"revoked {args.sender} on {args.channel} ({where})")
    return 0


async def _list(book: Pairing, place: Place, *, as_json: bool) -> int:
    now = time.time()
    waiting = await book.waiting()
    approved = await book.approved()
    if as_json:
        data = {
            place[0]: place[1],
            "pending": [
                {
                    "code": p.code,
                    "channel": p.channel,
                    "sender": p.sender,
                    "name": p.name,
                    "issued_at": p.issued_at,
                    "age_seconds": round(max(0.0, now - p.issued_at), 1),
                }
                for p in waiting
            ],
            "approved": [
                {"channel": channel, "sender": sender, "name": name}
                for channel, sender, name in approved
            ],
        }
        print(json.dumps(data, ensure_ascii=False))
        return 0
    print(f"{place[0].replace('_', ' ')} {place[1]}")
    for p in waiting:
        age = format_age(now - p.issued_at)
        print(f"{p.code}  {p.channel}  {_shown(p.sender)}  {_shown(p.name)}  {age} ago")
    if not waiting:
        print("no pairing codes waiting")
    for channel, sender, name in approved:
        print(f"approved  {channel}  {_shown(sender)}  {_shown(name)}")
    return 0
