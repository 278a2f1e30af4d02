"""Several ``botd run`` nodes on one PostgreSQL database for the cluster tests: each with its
own config file, state dir, ``store.node_id`` and log, a short lease TTL, and the scripted
model (which answers "You said: <text>")."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import psycopg

from tests.support.daemon_process import RunningDaemon, start_daemon

LEASE_TTL = 2.0
TELEGRAM_TOKEN = "123456:TEST-TOKEN"


@dataclass
class Node:
    """One node's files: its config and its log (the daemon's stderr)."""

    name: str
    config: Path
    log: Path

    def logged(self, text: str) -> bool:
        return self.log.exists() and text in self.log.read_text(encoding="utf-8", errors="replace")

    async def start(self, dsn: str) -> RunningDaemon:
        return await start_daemon(
            self.config,
            self.config.parent,
            log_path=self.log,
            TELEGRAM_TEST_TOKEN=TELEGRAM_TOKEN,
            BOTD_DATABASE_URL=dsn,
        )


def node(tmp_path: Path, name: str, channels: str) -> Node:
    """Node ``name`` under ``tmp_path/name`` with the ``channels:`` section ``channels``."""
    home = tmp_path / name
    home.mkdir()
    config = home / "botd.yaml"
    config.write_text(
        f"""state_dir: {json.dumps(str(home / "state"))}
health: {{enabled: false}}
shutdown_grace: 1
model: {{provider: scripted}}
store:
  backend: postgres
  dsn: ${{BOTD_DATABASE_URL}}
  node_id: {name}
  lease_ttl: {LEASE_TTL}
{channels}""",
        encoding="utf-8",
    )
    return Node(name, config, home / "daemon.log")


def accepted_message_ids(dsn: str) -> list[str]:
    """The platform message id of every inbox row, in accept order (empty before migration)."""
    try:
        with psycopg.connect(dsn) as conn:
            rows = conn.execute(
                "SELECT message::json->>'message_id' FROM inbox ORDER BY id"
            ).fetchall()
    except psycopg.errors.UndefinedTable:
        return []
    return [str(row[0]) for row in rows]


def unfinished_entries(dsn: str) -> int:
    """Inbox rows not yet answered (or otherwise finished)."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM inbox WHERE state IN ('accepted', 'running')"
        ).fetchone()
    return int(row[0]) if row else 0


def saved_offset(dsn: str, channel: str, account: str) -> int | None:
    try:
        with psycopg.connect(dsn) as conn:
            row = conn.execute(
                "SELECT value FROM offsets WHERE channel = %s AND account = %s",
                (channel, account),
            ).fetchone()
    except psycopg.errors.UndefinedTable:
        return None
    return None if row is None else int(row[0])


def lease_holders(dsn: str, prefix: str) -> dict[str, str]:
    """The unexpired leases whose name starts with ``prefix``: name -> holder."""
    try:
        with psycopg.connect(dsn) as conn:
            rows = conn.execute(
                "SELECT name, holder FROM leases"
                " WHERE name LIKE %s AND expires_at > clock_timestamp()",
                (prefix + "%",),
            ).fetchall()
    except psycopg.errors.UndefinedTable:
        return {}
    return {str(name): str(holder) for name, holder in rows}
