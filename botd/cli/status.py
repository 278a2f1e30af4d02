"""``botd status``: how the running botd is doing, asked from outside it.

The config is ``--config``, or else the running daemon's own, found as ``botd.cli.finding``
says (``./botd.yaml``, the installed unit's ``--config``, ``./var``; the first line printed
says which and how; none found is said, never replaced by the built-in console config). The
daemon is found through the config's state dir: its lock file (``statelock.holder_of``) has
its pid and the URL its health endpoint answers at (a lock of an earlier botd has the pid
alone: then ``health.host`` and ``health.port`` of the config), which is asked for
``/healthz``. Shown: which botd answers (version, pid, node), each channel up or not with its
last error, the runs in flight, the inbox backlog with the age of the oldest message not yet
answered, the reply pieces not yet sent, and the endpoint's problem lines. ``--json`` prints
one JSON object instead: ``status`` (``ok``, ``degraded``, ``unknown`` or ``not running``),
``config`` (the file used, null for the built-in one) and ``found_by`` (how, null with
``--config``), ``state_dir``, ``pid``, ``url``, ``health`` (the ``/healthz`` body, or null)
and ``reason`` (why the status is ``unknown`` or ``not running``, else null).

Exit status: 0 when everything is up; 1 when something is down or degraded, or when botd
runs but cannot be asked (its health endpoint is off or does not answer); 2 when the config
cannot be read; 3 when no botd runs on the state dir (no pid in its lock file, or that
process is gone) or no config was found.

On the postgres backend the answering node's own part (``node`` of ``/healthz``: its id, the
database as it sees it, the leases it holds, and each channel whose input another node holds
shown as ``standby (held by botd-1)``, or ``no node holds it for 20 s``) is shown, and the
shared database is read too, whether or not a botd runs here: the inbox backlog, the pieces
not yet confirmed sent, the pairing codes waiting, a line per node (``node botd-2: gone
28 s``) and the leases other than conversations' (holder, epoch, expiry). In ``--json``
that is ``database`` (null on SQLite): ``where``, ``error`` (one line when it cannot be read,
else null), ``schema_version``, ``inbox_backlog``, ``inbox_oldest_unanswered_seconds``,
``outbox_pending``, ``pairing_waiting``, ``leases`` (those that stand: ``name``, ``holder``,
``epoch``, ``expires_in``: seconds, zero or less once expired) and ``nodes``
(``botd.cluster.roster``). A database that cannot be read makes the exit status 1 (unless
no botd runs: 3).

Of the config only ``state_dir``, ``health`` and ``store`` are used, and unset ``${VAR}``s
are left as stand-ins, so the command works from a shell without the daemon's secrets (a
``store.dsn`` whose variable is unset is said to be, and the database is not read).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..config import BotdConfig
    from ..store.backends import StoreBackend

__all__ = ["EXIT_DOWN", "EXIT_NOT_RUNNING", "EXIT_OK", "add_parser", "status"]

EXIT_OK = 0
EXIT_DOWN = 1
EXIT_NOT_RUNNING = 3
REQUEST_TIMEOUT = 5.0
"""Seconds the health endpoint gets to answer."""


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add ``status`` to ``commands`` (argparse subparsers)."""
    parser = commands.add_parser(
        "status",
        parents=[common],
        help="show how the running botd is doing: channels, runs, inbox backlog",
        description=(
            "Ask the botd running on the config's state dir (the pid in its lock file) for "
            "its health: each channel up or down with its last error, runs in flight, the "
            "inbox backlog and its oldest unanswered message. Without --config, the running "
            "botd's own config is used: the first of ./botd.yaml, the installed botd.service "
            "unit's --config and ./var (the state dir of botd run without --config) whose "
            "state dir a botd holds. Exit 0 when all is up, 1 when something is down or botd "
            "cannot be asked, 3 when no botd runs (or none was found)."
        ),
    )
    parser.add_argument(
        "--config",
        default=None,
        metavar="FILE",
        help="the botd.yaml, for its state_dir and health port (its secrets need not be set); "
        "default: the running botd's, found as the description says",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")


@dataclass(frozen=True, slots=True)
class Report:
    """What ``botd status`` found."""

    status: str
    """``ok``, ``degraded``, ``unknown`` or ``not running``."""
    state_dir: Path | None
    """None: no config was found to take one from (``botd.cli.finding.NotFound``)."""
    pid: int | None
    url: str | None
    health: dict[str, Any] | None = None
    reason: str | None = None
    database: dict[str, Any] | None = None
    """The shared database as read by this command (postgres only; see the module docstring)."""
    config: Path | None = None
    """The config file used (None: given none, and the built-in config, or none found)."""
    found_by: str | None = None
    """How it was found when ``--config`` was not given (``botd.cli.finding``)."""

    @property
    def exit_status(self) -> int:
        if self.status == "not running":
            return EXIT_NOT_RUNNING
        if self.status == "ok" and not (self.database or {}).get("error"):
            return EXIT_OK
        return EXIT_DOWN

    def as_json(self) -> str:
        return json.dumps(
            {
                "status": self.status,
                "config": None if self.config is None else str(self.config),
                "found_by": self.found_by,
                "state_dir": None if self.state_dir is None else str(self.state_dir),
                "pid": self.pid,
                "url": self.url,
                "health": self.health,
                "reason": self.reason,
                "database": self.database,
            },
            ensure_ascii=False,
        )


def status(
    args: argparse.Namespace,
    *,
    say: Callable[..., None],
    register: Callable[[BotdConfig], BotdConfig],
) -> int:
    """Run ``botd status``; ``say`` prints (masked), ``register`` registers a loaded
    config's secrets for masking."""
    import sys

    from ..config import ConfigError, load_config
    from ..store.backends import store_backend
    from .finding import NotFound, find_config

    path, found_by = (Path(args.config) if args.config else None), None
    try:
        if path is not None:
            config = load_config(path, unset_ok=True)
        else:
            found = find_config(Path.cwd(), os.environ)
            config, path, found_by = found.config, found.path, found.how
    except ConfigError as exc:
        say(exc)
        return 2
    except NotFound as exc:
        report = Report("not running", None, None, None, reason=str(exc))
    else:
        register(config)
        report = replace(inspect(config), config=path, found_by=found_by)
        backend = store_backend(config.store)
        if backend.cluster:  # the database the nodes share is read too, from here
            report = replace(report, database=read_database(config, backend))
    if args.json:
        say(report.as_json(), file=sys.stdout)
    else:
        for line in describe(report):
            say(line, file=sys.stdout)
    return report.exit_status


def inspect(config: BotdConfig) -> Report:
    """Find the botd of ``config``'s state dir and ask its health endpoint: where its lock
    file says it serves it, else (a lock of an earlier botd) where ``config`` says."""
    from ..ops.ports import health_url
    from ..ops.statelock import holder_of

    state_dir = Path(config.state_dir)
    holding = holder_of(state_dir)
    if holding is None:
        return Report(
            "not running", state_dir, None, None, reason=f"no botd holds state dir {state_dir}"
        )
    pid = holding.pid
    if not config.health.enabled and holding.health is None:
        return Report(
            "unknown",
            state_dir,
            pid,
            None,
            reason="its health endpoint is off (health.enabled: false), so it cannot be asked",
        )
    if holding.recorded and holding.health is None:
        return Report(
            "unknown",
            state_dir,
            pid,
            None,
            reason="it serves no health endpoint yet (still starting), so it cannot be asked",
        )
    url = holding.health or health_url(config.health.host, config.health.port)
    try:
        body = _ask(url)
    except _NoAnswer as exc:
        return Report(
            "unknown",
            state_dir,
            pid,
            url,
            reason=f"its health endpoint does not answer ({exc}): still starting, or "
            "health.port changed since it started",
        )
    answering = _mapping(body.get("botd")).get("pid")
    if isinstance(answering, int) and answering != pid:
        return Report(
            "unknown",
            state_dir,
            pid,
            url,
            body,
            reason=f"the health endpoint answers for pid {answering}, not for pid {pid} "
            "holding the state dir: another botd uses that port",
        )
    return Report("ok" if body.get("status") == "ok" else "degraded", state_dir, pid, url, body)


def read_database(config: BotdConfig, backend: StoreBackend) -> dict[str, Any]:
    """The shared database as ``botd status`` shows it (see the module docstring, and
    ``StoreBackend.shared_state``); a database that cannot be read is ``error``, one line
    without the password."""
    from ..config.source import unset_variable
    from ..store import StoreError

    unset = unset_variable(config.store.dsn or "")
    if unset:
        return {
            "where": None,
            "error": f"store.dsn: ${{{unset}}} is not set in this shell (set it as "
            "botd's environment does)",
        }
    where = backend.where(config)
    try:
        state = asyncio.run(backend.shared_state(config)) or {}
    except StoreError as exc:
        return {"where": where, "error": str(exc)}
    return {"where": where, "error": None, **state}


class _NoAnswer(Exception):
    """The endpoint could not be reached, or did not answer with its JSON."""


def _ask(url: str) -> dict[str, Any]:
    import httpx

    try:
        # Never through a proxy: this is a loopback (or local) address.
        with httpx.Client(trust_env=False, timeout=REQUEST_TIMEOUT) as client:
            response = client.get(url)
    except httpx.HTTPError as exc:
        raise _NoAnswer(" ".join(str(exc).split()) or type(exc).__name__) from None
    if response.status_code not in (200, 503):
        raise _NoAnswer(f"HTTP {response.status_code}")
    try:
        body = response.json()
    except ValueError:
        raise _NoAnswer("not JSON") from None
    if not isinstance(body, dict):
        raise _NoAnswer("not a JSON object")
    return body


def describe(report: Report) -> list[str]:
    """``report`` as the lines ``botd status`` prints: first, when ``--config`` was not
    given, the config it found and how."""
    lines = []
    if report.found_by is not None:
        lines.append(f"config {report.config or '(built in)'}: {report.found_by}")
    lines.extend(_describe_node(report))
    if report.database is not None:
        lines.extend(_describe_database(report.database))
    return lines


def _describe_database(database: Mapping[str, Any]) -> list[str]:
    from ..cluster.leases import CONVERSATION_LEASE
    from .pairing import format_age

    where = database.get("where")
    if database.get("error"):
        return [f"database{f' {where}' if where else ''}: cannot be read: {database['error']}"]
    line = (
        f"database {where} (schema {database.get('schema_version', '?')}): "
        f"inbox {database.get('inbox_backlog', '?')} not answered yet"
    )
    oldest = database.get("inbox_oldest_unanswered_seconds")
    if isinstance(oldest, int | float):
        line += f" (the oldest for {format_age(oldest)})"
    line += (
        f", outbox {database.get('outbox_pending', '?')} piece(s) not confirmed sent, "
        f"{database.get('pairing_waiting', '?')} pairing code(s) waiting"
    )
    lines = [line]
    lines.extend(_node_roster(database.get("nodes")))
    leases = [
        lease
        for lease in database.get("leases") or []
        if isinstance(lease, dict) and not str(lease.get("name")).startswith(CONVERSATION_LEASE)
    ]
    width = max((len(str(lease.get("name"))) for lease in leases), default=0)
    for lease in leases:
        left = float(lease.get("expires_in") or 0.0)
        when = f"expires in {format_age(left)}" if left > 0 else f"expired {format_age(-left)} ago"
        lines.append(
            f"  lease {lease.get('name')!s:<{width}}  {lease.get('holder')}  "
            f"epoch {lease.get('epoch')}  {when}"
        )
    if not leases:
        lines.append("  no leases yet")
    return lines


def _describe_node(report: Report) -> list[str]:
    from .pairing import format_age

    if report.health is None or report.status == "unknown":
        if report.pid is None:
            return [f"botd is not running: {report.reason}"]
        return [f"botd runs (pid {report.pid}), but {report.reason}"]
    body = report.health
    about = _mapping(body.get("botd"))
    lines = [
        f"botd {about.get('version', '?')} (pid {about.get('pid', report.pid)}"
        f" on {about.get('node', '?')}): {report.status}"
    ]
    errors = _mapping(body.get("channel_errors"))
    channels = _mapping(body.get("channels"))
    inputs = _mapping(_mapping(body.get("node")).get("inputs"))
    width = max((len(str(name)) for name in channels), default=0)
    for name, state in sorted(channels.items()):
        shown = "up" if state == "running" else str(state)
        if state == "running" and isinstance(inputs.get(name), list):
            shown = _input_state(inputs[name])
        why = errors.get(name)
        lines.append(f"  channel {name:<{width}}  {shown}" + (f": {why}" if why else ""))
    stats = _mapping(body.get("stats"))
    if "runs_in_flight" in stats:
        lines.append(f"  runs in flight: {stats['runs_in_flight']}")
    if "inbox_backlog" in stats:
        backlog = f"  inbox: {stats['inbox_backlog']} not answered yet"
        oldest = stats.get("inbox_oldest_unanswered_seconds")
        if isinstance(oldest, int | float):
            backlog += f", the oldest for {format_age(oldest)}"
        lines.append(backlog)
    if "outbox_pending" in stats:
        lines.append(f"  outbox: {stats['outbox_pending']} piece(s) not yet confirmed sent")
    lines.extend(_node_lines(_mapping(body.get("node"))))
    problems = body.get("problems")
    if isinstance(problems, list):
        lines.extend(f"  problem: {problem}" for problem in problems)
    return lines


def _node_roster(found: object) -> list[str]:
    """A line per node: ``  node botd-1: up, holds scheduler, 2 conversation(s)``,
    ``  node botd-2: gone 28 s``."""
    from ..ops.outages import span

    lines = []
    for node in found if isinstance(found, list) else []:
        if not isinstance(node, dict):
            continue
        if node.get("state") != "up":
            lines.append(f"  node {node.get('id')}: gone {span(float(node.get('seconds') or 0))}")
            continue
        holds = [str(name) for name in node.get("holds") or []]
        if node.get("conversations"):
            holds.append(f"{node['conversations']} conversation(s)")
        lines.append(
            f"  node {node.get('id')}: up" + (f", holds {', '.join(holds)}" if holds else "")
        )
    return lines


def _input_state(states: list[Any]) -> str:
    """A running channel whose input one node takes at a time, as this node sees it: ``up``
    (it holds every lease of it), ``standby (held by botd-1)``, ``no node holds it for
    20 s``; a lease by lease account when they differ (Discord's shards)."""
    from ..ops.outages import span

    said = []
    for state in states:
        if not isinstance(state, dict):
            continue
        if state.get("state") == "holding":
            said.append("up")
        elif state.get("state") == "standby":
            said.append(f"standby (held by {state.get('holder')})")
        elif isinstance(state.get("seconds"), int | float):
            said.append(f"no node holds it for {span(float(state['seconds']))}")
        else:
            said.append("no node holds it yet")
    if len(set(said)) == 1:
        return said[0]
    names = [str(state.get("lease")) for state in states if isinstance(state, dict)]
    return "; ".join(f"{name}: {what}" for name, what in zip(names, said, strict=True))


def _node_lines(node: Mapping[str, Any]) -> list[str]:
    """The answering node: its id and backend, the database as it sees it, its leases."""
    if not node:
        return []
    database = _mapping(node.get("database"))
    seen = ""
    if database:
        seen = f", {database.get('where', '?')} " + (
            f"reachable (schema {_schema(database)})"
            if database.get("reachable")
            else f"not reachable: {database.get('reason')}"
        )
    lines = [f"  node {node.get('id', '?')} ({node.get('backend', '?')}{seen})"]
    held = [lease for lease in node.get("leases") or [] if isinstance(lease, dict)]
    if held:
        lines.append(
            "  leases held: "
            + ", ".join(
                f"{lease.get('name')} (epoch {lease.get('epoch')}, "
                f"{float(lease.get('seconds_left') or 0):.0f} s left)"
                for lease in held
            )
        )
    return lines


def _schema(database: Mapping[str, Any]) -> str:
    """The schema version a node found, and what it means when it is newer than it knows."""
    found, known = database.get("schema_version"), database.get("schema_known")
    if isinstance(found, int) and isinstance(known, int) and found > known:
        return (
            f"{found}, newer than this botd's {known}: a newer node migrated it; this one "
            "keeps running but cannot start again until it is upgraded"
        )
    return str(found)


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}
