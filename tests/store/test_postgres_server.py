"""The tests' own PostgreSQL server behaves as the store's crash tests assume.

The backend's tests stop the server with ``immediate`` to stand for a database that crashed;
that is only a fair test if a commit acknowledged before the stop survives it and work not
committed does not, and if the server comes back on the same address.
"""

from __future__ import annotations

import psycopg
import pytest

from tests.support.pg_server import PostgresServer


def test_a_crash_keeps_what_was_committed_and_drops_what_was_not(
    postgres_server: PostgresServer, postgres_dsn: str
) -> None:
    with psycopg.connect(postgres_dsn, autocommit=True) as setup:
        setup.execute("CREATE TABLE kept (n int)")
        setup.execute("INSERT INTO kept VALUES (1)")
    open_work = psycopg.connect(postgres_dsn)
    open_work.execute("INSERT INTO kept VALUES (2)")  # a transaction left open

    postgres_server.stop("immediate")
    with pytest.raises(psycopg.OperationalError):
        open_work.execute("COMMIT")
    open_work.close()
    postgres_server.start()

    with psycopg.connect(postgres_dsn) as after:
        rows = after.execute("SELECT n FROM kept ORDER BY n").fetchall()
    assert rows == [(1,)]


def test_each_test_gets_an_empty_database_of_its_own(
    postgres_server: PostgresServer, postgres_dsn: str
) -> None:
    other = postgres_server.new_database()
    assert other != postgres_dsn
    with psycopg.connect(postgres_dsn) as mine, psycopg.connect(other) as theirs:
        mine.execute("CREATE TABLE only_here (n int)")
        mine.commit()
        names = theirs.execute(
            "SELECT count(*) FROM pg_tables WHERE tablename = 'only_here'"
        ).fetchone()
    assert names == (0,)
