"""The PostgreSQL schema's migrations: once, by one node, and never over a newer schema."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from botd.store.postgres.schema import SCHEMA_VERSION, NewerSchema, migrate, schema_version


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
        with pytest.raises(NewerSchema, match=r"^db: schema version \d+ is newer"):
            await migrate(conn, "db")
        assert await schema_version(conn) == SCHEMA_VERSION + 1
