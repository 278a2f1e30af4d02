"""The PostgreSQL store's checks (``store.backend: postgres``), changing nothing.

* ``store.dsn``: the server is reached with the configured DSN (the server's own version
  line, or libpq's words for why not; the DSN is named without its password);
* ``store.schema``: the schema version this botd understands, an older one (migrated when
  botd starts), or a newer one (refused: the line botd would refuse to start with);
* ``store.clock``: this node's clock against the database's ``clock_timestamp()``. Leases
  expire by the database's clock, and a node counts its own deadline on its monotonic
  clock; a node whose wall clock is more than ``CLOCK_SKEW_WARN`` off is one whose time
  keeping (NTP) is not working, which is the first suspect when its clock also runs at
  another rate than the database's.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from .checks import Check, failed, passed, warned

__all__ = ["CLOCK_SKEW_WARN", "postgres_checks"]

CLOCK_SKEW_WARN = 1.0
"""Seconds between this node's clock and the database's above which doctor warns."""

POSTGRES_MISSING = "store.backend is postgres but psycopg is not installed"


async def postgres_checks(
    dsn: str, timeout: float, *, clock: Callable[[], float] = time.time
) -> list[Check]:
    """The database's checks (see the module docstring); ``clock`` is this node's."""
    try:
        import psycopg

        from ...store.postgres import SCHEMA_VERSION, describe
        from ...store.postgres.base import password_of, words
        from ...store.postgres.schema import schema_version
    except ImportError:
        return [failed("store.dsn", POSTGRES_MISSING, "pip install 'botd[postgres]'")]
    where = describe(dsn)
    try:
        conn = await psycopg.AsyncConnection.connect(
            dsn, connect_timeout=max(1, round(timeout)), autocommit=True
        )
    except psycopg.Error as exc:
        return [
            failed(
                "store.dsn",
                f"database {where}: cannot connect ({words(exc, password_of(dsn))})",
                "check store.dsn (and the variable it names) and that the server runs and "
                "takes connections from this host",
            )
        ]
    async with conn:
        cur = await conn.execute("SELECT version()")
        row = await cur.fetchone()
        server = str(row[0]).split(" on ", 1)[0] if row else "PostgreSQL"
        checks = [passed("store.dsn", f"database {where} reachable ({server})")]
        version = await schema_version(conn)
        checks.append(_schema_check(where, version, SCHEMA_VERSION))
        before = clock()
        cur = await conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8")
        after = clock()
        row = await cur.fetchone()
    assert row is not None
    checks.append(_clock_check(float(row[0]) - (before + after) / 2, (after - before) / 2))
    return checks


def _schema_check(where: str, version: int, current: int) -> Check:
    if version > current:
        return failed(
            "store.schema",
            f"database {where} has schema {version}, newer than this botd understands ({current})",
            "upgrade botd or point store.dsn elsewhere",
        )
    if version == 0:
        return passed("store.schema", f"no schema yet; botd creates it (schema {current}) at start")
    if version < current:
        return passed(
            "store.schema", f"schema {version}; it will be migrated to {current} at start"
        )
    return passed("store.schema", f"schema {version} (current)")


def _clock_check(skew: float, within: float) -> Check:
    """``skew``: the database's clock minus this node's (seconds), measured to ``within``."""
    side = "ahead of" if skew < 0 else "behind"
    meaning = (
        "leases expire by the database's clock while this node counts its deadlines on its "
        "own clock, so the two must keep time alike"
    )
    if abs(skew) - within > CLOCK_SKEW_WARN:
        return warned(
            "store.clock",
            f"this node's clock is {abs(skew):.1f} s {side} the database's ({meaning})",
            "check the time sync (NTP, chrony) of this host and of the database's",
        )
    return passed(
        "store.clock",
        f"this node's clock is within {max(abs(skew), within):.2f} s of the database's ({meaning})",
    )
