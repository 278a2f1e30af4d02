"""The store's backends, chosen once from ``store.backend``: what each one opens, where its
node's leases and DM pairing live (and whether the leases lapse), the inbox its conversations
are pulled from, and what the doctor and ``botd status`` read of it."""

from __future__ import annotations

from pathlib import Path

from botd.cluster.leases import ProcessLeases
from botd.config import BotdConfig, parse_config
from botd.store.backends import POSTGRES, SQLITE, store_backend
from botd.store.pairing import PairingFile
from botd.store.postgres import PostgresStore
from botd.store.sqlite import DB_FILENAME, SqliteStore
from botd.wiring import open_leases, open_store


def sqlite_config(tmp_path: Path) -> BotdConfig:
    return parse_config(f"state_dir: {tmp_path}\n", {})


def postgres_config(tmp_path: Path, dsn: str) -> BotdConfig:
    text = f"state_dir: {tmp_path}\nstore:\n  backend: postgres\n  dsn: ${{DB}}\n  node_id: n1\n"
    return parse_config(text, {"DB": dsn})


def test_each_backend_is_chosen_by_its_name(tmp_path: Path) -> None:
    assert store_backend(sqlite_config(tmp_path).store) is SQLITE
    config = postgres_config(tmp_path, "postgresql://botd:pw@db.internal:5432/botd")
    assert store_backend(config.store) is POSTGRES
    assert (SQLITE.name, SQLITE.cluster, POSTGRES.name, POSTGRES.cluster) == (
        "sqlite",
        False,
        "postgres",
        True,
    )
    # Named for people, the password left out.
    assert POSTGRES.where(config) == "postgresql://botd@db.internal:5432/botd"
    assert SQLITE.where(sqlite_config(tmp_path)) == str(tmp_path / DB_FILENAME)


async def test_sqlite_is_a_node_alone_with_its_pairing_in_the_state_dir(tmp_path: Path) -> None:
    config = sqlite_config(tmp_path)
    store = await open_store(config)
    try:
        assert isinstance(store, SqliteStore)
        assert (tmp_path / DB_FILENAME).is_file()
        assert isinstance(SQLITE.lease_table(store), ProcessLeases)
        assert not open_leases(config, store, SQLITE).lapses  # no other node to give way to
        assert SQLITE.inbox(store) is store  # its conversations pulled from it as well
        pairing = SQLITE.pairing(config, store)
        assert isinstance(pairing, PairingFile)
        await pairing.issue("telegram", "42", "Ann")
        assert (tmp_path / "pairing.json").is_file()
        assert await SQLITE.shared_state(config) is None  # nothing beyond the node's endpoint
        [check] = await SQLITE.doctor(config, 5)
        assert (check.name, check.status) == ("state_dir.database", "ok")
    finally:
        await store.aclose()


async def test_sqlite_doctor_says_nothing_without_a_state_dir(tmp_path: Path) -> None:
    assert await SQLITE.doctor(sqlite_config(tmp_path / "not-yet"), 5) == []


async def test_postgres_shares_leases_pairing_and_the_inbox(
    tmp_path: Path, postgres_dsn: str
) -> None:
    config = postgres_config(tmp_path, postgres_dsn)
    store = await open_store(config)
    try:
        assert isinstance(store, PostgresStore)
        assert not (tmp_path / DB_FILENAME).exists()
        leases = open_leases(config, store, POSTGRES)
        assert leases.lapses and await leases.try_claim("scheduler") is not None
        assert POSTGRES.inbox(store) is store
        code, _ = await POSTGRES.pairing(config, store).issue("telegram", "42", "Ann")
        state = await POSTGRES.shared_state(config)
        assert state is not None
        assert state["pairing_waiting"] == 1 and code
        assert [(r["name"], r["holder"]) for r in state["leases"]] == [("scheduler", "n1")]
        names = {check.name for check in await POSTGRES.doctor(config, 5)}
        assert {"store.dsn", "store.schema"} <= names
    finally:
        await store.aclose()
