"""The PostgreSQL schema's migrations: once, by one node, and never over a newer schema."""

from __future__ import annotations

import asyncio
import re

import psycopg
import pytest

from botd.store.postgres.schema import (
    MIGRATIONS,
    SCHEMA_VERSION,
    NewerSchema,
    migrate,
    schema_version,
)


async def test_nodes_starting_together_migrate_once(postgres_dsn: str) -> None:
    async def node() -> int:
        async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
            return await migrate(conn, "db")

    assert await asyncio.gather(*(node() for _ in range(4))) == [SCHEMA_VERSION] * 4
    async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
        assert await schema_version(conn) == SCHEMA_VERSION
        cur = await conn.execute("SELECT count(*) FROM schema_version")
        assert await cur.fetchone() == (1,)
        for table in ("inbox", "outbox", "leases", "pairing_codes", "scheduler_jobs"):
            cur = await conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,))
            assert await cur.fetchone() == (True,), table


async def test_a_schema_from_a_newer_botd_is_refused_untouched(postgres_dsn: str) -> None:
    async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as conn:
        await migrate(conn, "db")
        await conn.execute("UPDATE schema_version SET version = %s", (SCHEMA_VERSION + 1,))
        with pytest.raises(NewerSchema) as refused:
            await migrate(conn, "db")
        assert await schema_version(conn) == SCHEMA_VERSION + 1
    assert str(refused.value) == (
        f"db: schema version {SCHEMA_VERSION + 1} is newer than this botd understands "
        f"({SCHEMA_VERSION}), a newer botd migrated it: upgrade botd to that release (or "
        "later), or point store.dsn elsewhere; going back to an older botd is not supported "
        "(restore the backup taken before the upgrade)"
    )


async def test_the_node_that_migrates_logs_it_once(
    postgres_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def node(migrations: tuple[tuple[str, ...], ...] = MIGRATIONS) -> int:
        async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
            return await migrate(conn, "db", migrations)

    with caplog.at_level("INFO", logger="botd.store.migrations"):
        assert await node(MIGRATIONS[:-1]) == SCHEMA_VERSION - 1  # the previous release's
        assert caplog.messages == [f"db: schema created (version {SCHEMA_VERSION - 1})"]
        caplog.clear()
        assert await asyncio.gather(*(node() for _ in range(3))) == [SCHEMA_VERSION] * 3
        assert await node() == SCHEMA_VERSION
    assert caplog.messages == [
        f"db: schema migrated from version {SCHEMA_VERSION - 1} to {SCHEMA_VERSION}"
    ]


# What migrations may do, so that the nodes of the previous release keep working against the
# schema the first upgraded node migrated: add. Never drop, rename or narrow.
ADDITIVE = re.compile(
    r"\s*(CREATE TABLE \w+ \(|CREATE (UNIQUE )?INDEX \w+ ON |INSERT INTO \w+\s|"
    r"ALTER TABLE \w+ ADD COLUMN \w+ \w+( (DEFAULT .*|NOT NULL DEFAULT .*))?\s*$)",
    re.DOTALL,
)


def test_every_migration_only_adds() -> None:
    for version, steps in enumerate(MIGRATIONS, start=1):
        for statement in steps:
            assert ADDITIVE.match(statement), (version, statement)
            assert not re.search(r"\b(DROP|RENAME)\b", statement), (version, statement)
