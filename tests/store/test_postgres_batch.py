"""One batch of the PostgreSQL store in one transaction (``botd.store.postgres.batch``): a
batch of records and ``Statement`` writes is one query, one round trip, its start, its lock
check and its commit included, and each statement's caller gets what its rows say; anything
that fails stops the query, and nothing of the batch is written."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from psycopg.rows import TupleRow

from botd.store.postgres.batch import Conn, Queued, Statement, in_few_round_trips
from botd.store.postgres.text import ADAPTERS
from tests.fakes.tcp_proxy import SilentProxy


@pytest.fixture
async def table(migrated_postgres_dsn: str) -> AsyncIterator[str]:
    async with await psycopg.AsyncConnection.connect(
        migrated_postgres_dsn, autocommit=True
    ) as conn:
        await conn.execute("CREATE TABLE batch_rows (id serial PRIMARY KEY, v text UNIQUE)")
    yield migrated_postgres_dsn


async def values(dsn: str) -> list[str]:
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        cur = await conn.execute("SELECT v FROM batch_rows ORDER BY id")
        return [str(row[0]) for row in await cur.fetchall()]


def record(value: str) -> Queued:
    async def write(conn: Conn) -> None:
        await conn.execute("INSERT INTO batch_rows (v) VALUES (%s)", (value,))

    return Queued("record", write, None)


def statement(value: str, *, locks: tuple[str, ...] = ()) -> Queued:
    def first(rows: list[TupleRow]) -> Any:
        [(row_id, text)] = rows
        return int(row_id), str(text)

    write = Statement("INSERT INTO batch_rows (v) VALUES (%s) RETURNING id, v", (value,), first)
    return Queued("statement", write, asyncio.get_running_loop().create_future(), locks)


async def test_records_and_statements_are_one_round_trip_each_caller_reading_its_own_rows(
    table: str,
) -> None:
    """Once the connection has prepared the batch's statements (the second time it renders
    each, one round trip of its own each), a batch is one round trip."""

    def batch(n: int) -> list[Queued]:
        return [
            record(f"a{n}"),
            statement(f"b{n} %s it's", locks=("conversation",)),
            record(f"c{n}"),
            statement(f"d{n}"),
        ]

    async with (
        SilentProxy.to_database(table) as proxy,
        await psycopg.AsyncConnection.connect(
            proxy.dsn(table), autocommit=True, context=ADAPTERS
        ) as conn,
    ):
        for n in range(2):
            await in_few_round_trips(conn, batch(n))
        last = batch(2)
        before = proxy.round_trips
        written = await in_few_round_trips(conn, last)
        assert proxy.round_trips - before == 1
        [prepared] = await (
            await conn.execute("SELECT count(*) FROM pg_prepared_statements")
        ).fetchone() or [0]
        assert prepared == 3  # the record, the statement, the lock check
    assert [(future, failure) for future, _, failure in written.outcomes] == [
        (last[1].future, None),
        (last[3].future, None),
    ]
    ids = [value for _, value, _ in written.outcomes]
    assert [text for _, text in ids] == ["b2 %s it's", "d2"]
    assert ids[0][0] < ids[1][0]
    assert await values(table) == [
        f"{v}{n}{s}"
        for n in range(3)
        for v, s in [("a", ""), ("b", " %s it's"), ("c", ""), ("d", "")]
    ]


async def test_a_statement_the_server_cannot_prepare_is_rendered_in_full(table: str) -> None:
    """A parameter whose type the server cannot tell from the statement alone: the
    statement is refused as a prepared one, once, and goes rendered in full, its batches
    written as ever."""

    def untyped(value: str) -> Queued:
        async def write(conn: Conn) -> None:
            await conn.execute(
                "INSERT INTO batch_rows (v) SELECT %s WHERE %s IS NOT NULL", (value, value)
            )

        return Queued("record", write, None)

    async with await psycopg.AsyncConnection.connect(table, autocommit=True) as conn:
        for n in range(3):
            await in_few_round_trips(conn, [untyped(f"u{n}"), record(f"r{n}")])
        cur = await conn.execute("SELECT statement FROM pg_prepared_statements")
        [(prepared,)] = await cur.fetchall()
        assert "INSERT INTO batch_rows (v) VALUES ($1)" in prepared  # the record's only
    assert await values(table) == ["u0", "r0", "u1", "r1", "u2", "r2"]


async def test_a_statement_that_fails_stops_the_batch_and_nothing_is_written(
    table: str,
) -> None:
    async with await psycopg.AsyncConnection.connect(table, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.UniqueViolation):
            await in_few_round_trips(conn, [record("a"), statement("a"), record("b")])
        await conn.execute("ROLLBACK")  # the caller's part: then it writes with care
    assert await values(table) == []


async def test_a_reading_that_fails_fails_its_caller_only_the_write_stands(table: str) -> None:
    def broken(rows: list[TupleRow]) -> None:
        raise LookupError("a bug in the reading")

    future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    write = Statement("INSERT INTO batch_rows (v) VALUES ('x') RETURNING id", (), broken)
    async with await psycopg.AsyncConnection.connect(table, autocommit=True) as conn:
        written = await in_few_round_trips(conn, [Queued("broken", write, future), statement("y")])
    [(first, _, failure), (_, value, fine)] = written.outcomes
    assert first is future and isinstance(failure, LookupError)
    assert fine is None and value[1] == "y"
    assert await values(table) == ["x", "y"]
