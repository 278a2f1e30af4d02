"""A rolling upgrade on one PostgreSQL: the first node of the next release migrates the
schema while the nodes of this release still run (docs/several-nodes.md, "Upgrading").

The next release is this code with one more migration of the kinds migrations are kept to
(a table, columns that may be NULL or have a default: ``test_postgres_schema`` checks every
shipped one), applied through the same ``migrate`` as a start applies it. The node of this
release running then goes on answering, and says in ``/healthz`` and ``botd status`` that
the schema is newer than it knows; a node of this release started then is refused in one
line naming both versions and what to do (the same refusal a rollback meets).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import psycopg
import pytest

from botd.store.postgres import SCHEMA_VERSION, describe
from botd.store.postgres.schema import MIGRATIONS, migrate
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.chat import chatting
from tests.support.daemon_inprocess import telegram_yaml
from tests.support.daemon_process import run_botd
from tests.support.health_probe import free_port

pytestmark = pytest.mark.no_nodes

NEXT_RELEASE = (
    "CREATE TABLE upgrade_notes (id bigint PRIMARY KEY, note text NOT NULL)",
    "ALTER TABLE inbox ADD COLUMN upgrade_note text",
    "ALTER TABLE outbox ADD COLUMN upgrade_mark integer NOT NULL DEFAULT 0",
)
"""The migration the next release brings (what this release's nodes have never seen)."""


async def test_a_node_of_this_release_keeps_answering_after_the_next_one_migrated(
    tmp_path: Path, postgres_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    # A password (the server trusts loopback and never checks it), so the database's name
    # without it is no secret to mask.
    dsn = postgres_dsn.replace("botd@", "botd:pw-4711@")
    store = f"store: {{backend: postgres, dsn: {json.dumps(dsn)}, lease_ttl: 3}}\n"
    health = f"health: {{enabled: true, port: {free_port()}}}\n"
    config = tmp_path / "node-a.yaml"  # what botd status reads: its state dir and store
    config.write_text(
        f"state_dir: {json.dumps(str(tmp_path / 'state'))}\n" + store, encoding="utf-8"
    )
    where = describe(dsn)
    async with (
        FakeTelegramAPI() as telegram,
        chatting(tmp_path, telegram, sections=[store, health]) as dm,
    ):
        await dm.send("before")
        assert await dm.reply() == "You said: before"

        # The first node of the next release starts: it migrates the schema.
        async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
            with caplog.at_level("INFO", logger="botd.store.migrations"):
                assert await migrate(conn, where, (*MIGRATIONS, NEXT_RELEASE)) == (
                    SCHEMA_VERSION + 1
                )
        assert f"{where}: schema migrated from version {SCHEMA_VERSION} to " in caplog.text

        # The node of this release goes on answering against it.
        await dm.send("after")
        assert await dm.reply() == "You said: after"
        await dm.send("and again")
        assert await dm.reply() == "You said: and again"

        done = await asyncio.to_thread(run_botd, "status", "--config", str(config), "--json")
        body = json.loads(done.stdout)
        assert body["status"] == "ok", body  # working: no problem, but said
        database = body["health"]["node"]["database"]
        assert (database["schema_version"], database["schema_known"]) == (
            SCHEMA_VERSION + 1,
            SCHEMA_VERSION,
        )
        done = await asyncio.to_thread(run_botd, "status", "--config", str(config))
        assert (
            f"reachable (schema {SCHEMA_VERSION + 1}, newer than this botd's {SCHEMA_VERSION}: "
            "a newer node migrated it; this one keeps running but cannot start again until it "
            "is upgraded))"
        ) in done.stdout, done.stdout

        # A node of this release started now (or one rolled back to it) is refused.
        second = tmp_path / "node-b.yaml"
        second.write_text(
            f"state_dir: {json.dumps(str(tmp_path / 'state-b'))}\n"
            "health: {enabled: false}\n"
            f"store: {{backend: postgres, dsn: {json.dumps(dsn)}, node_id: node-b}}\n"
            + telegram_yaml(telegram, "dm_policy: open"),
            encoding="utf-8",
        )
        refused = await asyncio.to_thread(run_botd, "run", "--config", str(second))
        assert refused.returncode == 2
        assert refused.stderr.splitlines()[-1] == (
            f"botd: {where}: schema version {SCHEMA_VERSION + 1} is newer than this botd "
            f"understands ({SCHEMA_VERSION}), a newer botd migrated it: upgrade botd to that "
            "release (or later), or point store.dsn elsewhere; going back to an older botd is "
            "not supported (restore the backup taken before the upgrade)"
        )
