"""The ``store`` section: SQLite by default, PostgreSQL with a DSN that is a secret."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from botd.config import ConfigError, parse_config
from botd.store import StoreOpenError
from botd.wiring import open_store

DSN = "postgresql://botd:s3cret-pw@db.internal:5432/botd"


def test_sqlite_is_the_default_and_the_node_is_named_after_its_host() -> None:
    store = parse_config("{}", {}).store
    assert store.backend == "sqlite" and store.dsn is None
    assert store.node_id == socket.gethostname() and store.lease_ttl == 15.0


def test_postgres_takes_its_dsn_from_the_environment() -> None:
    text = "store:\n  backend: postgres\n  dsn: ${DB}\n  node_id: a\n  lease_ttl: 5\n"
    store = parse_config(text, {"DB": DSN}).store
    assert (store.backend, store.dsn, store.node_id, store.lease_ttl) == ("postgres", DSN, "a", 5)


def test_postgres_without_a_dsn_names_the_section_and_its_line() -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config("state_dir: ./var\nstore:\n  backend: postgres\n", {})
    assert str(refused.value) == (
        "<config>:2: store: the postgres backend needs dsn (e.g. ${BOTD_DATABASE_URL})"
    )


def test_a_bad_store_value_names_its_key_and_never_echoes_the_dsn() -> None:
    text = "store:\n  backend: mysql\n  dsn: " + DSN + "\n  lease_ttl: 0\n"
    with pytest.raises(ConfigError) as refused:
        parse_config(text, {})
    lines = str(refused.value).splitlines()
    assert lines[0].startswith("<config>:2: store.backend: expected 'sqlite' or 'postgres'")
    assert lines[1] == "<config>:4: store.lease_ttl: must be more than 0.0, got 0"
    assert "s3cret-pw" not in str(refused.value)


async def test_postgres_without_psycopg_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("psycopg", "botd.store.postgres"):
        monkeypatch.setitem(sys.modules, name, None)  # as if the extra were not installed
    text = f"state_dir: {tmp_path}\nstore:\n  backend: postgres\n  dsn: ${{DB}}\n"
    config = parse_config(text, {"DB": DSN})
    with pytest.raises(StoreOpenError) as refused:
        await open_store(config)
    assert str(refused.value) == (
        "store.backend is postgres but psycopg is not installed: pip install 'botd[postgres]'"
    )
