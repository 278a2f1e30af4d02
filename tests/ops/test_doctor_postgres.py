"""``botd doctor`` with ``store.backend: postgres``: the server reached (or not, in libpq's
words), its schema, and this node's clock against the database's, each one line, the DSN's
password never shown."""

from __future__ import annotations

import time
from pathlib import Path

import psycopg

from botd.ops.doctor.database import postgres_checks
from botd.store.postgres.schema import SCHEMA_VERSION, migrate
from tests.ops.harness import doctor, write_config
from tests.support.health_probe import free_port

PASSWORD = "doctor-pw-not-shown"


def with_password(dsn: str) -> str:
    return dsn.replace("botd@", f"botd:{PASSWORD}@", 1)


def where(dsn: str) -> str:
    return dsn.replace(f":{PASSWORD}", "")


async def test_a_reachable_current_database_passes_every_line(
    tmp_path: Path, postgres_dsn: str
) -> None:
    async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
        await migrate(conn, "db")
    config = write_config(tmp_path)
    store = "store:\n  backend: postgres\n  dsn: ${BOTD_DATABASE_URL}\n"
    config.write_text(config.read_text(encoding="utf-8") + store, encoding="utf-8")
    dsn = with_password(postgres_dsn)
    report = await doctor(config, tmp_path, BOTD_DATABASE_URL=dsn)
    assert PASSWORD not in report.out + report.err
    assert report.status == 0, report.out + report.err
    lines = report.out.splitlines()
    assert f"✓ database {where(dsn)} reachable (PostgreSQL " in report.out
    assert f"✓ schema {SCHEMA_VERSION} (current)" in lines
    assert any(line.startswith("✓ this node's clock is within ") for line in lines)
    assert "leases expire by the database's clock" in report.out
    assert not any("botd.sqlite3" in line or "database opens" in line for line in lines)


async def test_an_unreachable_database_is_one_failed_line_in_libpqs_words(
    postgres_dsn: str,
) -> None:
    closed = with_password(postgres_dsn).rsplit(":", 1)[0] + f":{free_port()}/db"
    [check] = await postgres_checks(closed, 5)
    assert check.status == "fail" and check.name == "store.dsn"
    line = check.line()
    assert line.startswith(f"✗ database {where(closed)}: cannot connect (")
    assert "Connection refused" in line and "check store.dsn" in line
    assert PASSWORD not in line and "\n" not in line


async def test_the_schema_line_says_empty_current_or_newer(postgres_dsn: str) -> None:
    checks = {c.name: c for c in await postgres_checks(postgres_dsn, 5)}
    assert checks["store.schema"].line() == (
        f"✓ no schema yet; botd creates it (schema {SCHEMA_VERSION}) at start"
    )
    async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as conn:
        await migrate(conn, "db")
        await conn.execute("UPDATE schema_version SET version = %s", (SCHEMA_VERSION + 1,))
    checks = {c.name: c for c in await postgres_checks(postgres_dsn, 5)}
    assert checks["store.schema"].status == "fail"
    assert checks["store.schema"].line() == (
        f"✗ database {where(postgres_dsn)} has schema {SCHEMA_VERSION + 1}, newer than this "
        f"botd understands ({SCHEMA_VERSION}): upgrade botd or point store.dsn elsewhere"
    )


async def test_a_node_clock_off_by_seconds_warns(postgres_dsn: str) -> None:
    fast = {
        c.name: c for c in await postgres_checks(postgres_dsn, 5, clock=lambda: time.time() + 5)
    }
    check = fast["store.clock"]
    assert check.status == "warn"
    assert check.line().startswith("⚠ this node's clock is 5.0 s ahead of the database's (")
    assert "check the time sync" in check.line()
    slow = {
        c.name: c for c in await postgres_checks(postgres_dsn, 5, clock=lambda: time.time() - 3)
    }
    assert (
        slow["store.clock"].line().startswith("⚠ this node's clock is 3.0 s behind the database's")
    )
