"""The store's backends, each described once and chosen once from ``store.backend``.

A ``StoreBackend`` says everything botd does differently for a backend, so that no other
module compares backend names:

* how the store is opened (``open``), and how ``botd status`` reads it from outside a running
  botd (``shared_state``: only for a store the nodes share);
* whether several nodes share it (``cluster``): then this node's leases live in it
  (``lease_table``), the node claims its own id there at start (the database's counterpart of
  the state dir's lock, ``botd.cluster.leases.hold_node``), and the schedule runs on the node
  holding its lease; alone, the node's leases are in memory and never lapse, and the state
  dir's lock is all it needs. Either way conversations are held by lease and their entries
  pulled from the store's inbox (``inbox``: ``botd.conversation.dispatcher``);
* where DM pairing is kept (``pairing``: the database every node reads, or ``pairing.json``
  in the state dir);
* what ``botd doctor`` checks of it (``doctor``: the database file in the state dir, or the
  server, its schema and this node's clock).

``store_backend`` picks one by ``store.backend``. Each imports its implementation when it is
first used: psycopg (the ``postgres`` extra) only for postgres, and nothing of either store
for a command that does not open one. This module is how the rest of botd reaches the SQLite
store (``tests/test_import_graph.py``): it imports ``botd.store.sqlite`` only here and in the
operator's commands.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..cluster.budget import SharedRate
from ..cluster.leases import LeaseTable, ProcessLeases
from .errors import StoreOpenError

if TYPE_CHECKING:
    from ..config import BotdConfig
    from ..config.schema import StoreSection
    from ..ops.doctor.checks import Check
    from .postgres import PostgresStore
    from .protocols import ConversationInbox, Pairing, Store

__all__ = ["POSTGRES", "POSTGRES_MISSING", "SQLITE", "StoreBackend", "store_backend"]

POSTGRES_MISSING = (
    "store.backend is postgres but psycopg is not installed: pip install 'botd[postgres]'"
)


class StoreBackend:
    """One backend of the store (see the module docstring); ``SQLITE`` and ``POSTGRES``."""

    name: str
    cluster: bool
    """Several nodes share the store: leases, node ids, the conversations' leases and the
    scheduler's leadership live in it."""

    async def open(self, config: BotdConfig) -> Store:
        """The store ``config.store`` names, open and migrated. Raises ``StoreOpenError``
        (one line, no password) when it cannot be used."""
        raise NotImplementedError

    async def open_beside(self, config: BotdConfig) -> Store:
        """The store for an operator's command run beside botd (``botd pairing``): as
        ``open``, but a database the nodes share is not migrated: they migrate it when they
        start, and a command of a newer botd must not migrate it under the nodes of the
        release before (a rolling upgrade, docs/several-nodes.md)."""
        return await self.open(config)

    def lease_table(self, store: Store) -> LeaseTable:
        """Where this node's leases are claimed: in memory for a node alone."""
        return ProcessLeases()

    def shared_rate(self, store: Store) -> SharedRate | None:
        """Where the nodes share each bot's platform rate: nowhere for a node alone (each
        budget keeps its rate in memory)."""
        return None

    def inbox(self, store: Store) -> ConversationInbox:
        """The inbox the holder of a conversation pulls its entries from: the store's."""
        return store

    def pairing(self, config: BotdConfig, store: Store) -> Pairing:
        """Where DM pairing lives: ``pairing.json`` in the state dir unless the backend keeps
        it in ``store``."""
        from .pairing import PairingFile

        return PairingFile(Path(config.state_dir) / "pairing.json")

    def where(self, config: BotdConfig) -> str:
        """The store named for people (a database without its password)."""
        raise NotImplementedError

    def known_schema(self) -> int:
        """The schema version this botd's code migrates the store to."""
        raise NotImplementedError

    async def doctor(self, config: BotdConfig, timeout: float) -> list[Check]:
        """``botd doctor``'s checks of the store, changing nothing."""
        raise NotImplementedError

    async def shared_state(self, config: BotdConfig) -> dict[str, Any] | None:
        """What ``botd status`` shows of a store the nodes share, read from outside any
        botd (``botd.cli.status``); None for a store only its botd reads."""
        return None


class _Sqlite(StoreBackend):
    """SQLite in the state dir: one node, the state dir's lock makes it the only one."""

    name = "sqlite"
    cluster = False

    async def open(self, config: BotdConfig) -> Store:
        from .sqlite import SqliteStore

        return SqliteStore.open(Path(config.state_dir))

    def where(self, config: BotdConfig) -> str:
        from .sqlite import DB_FILENAME

        return str(Path(config.state_dir) / DB_FILENAME)

    def known_schema(self) -> int:
        from .sqlite import SCHEMA_VERSION

        return SCHEMA_VERSION

    async def doctor(self, config: BotdConfig, timeout: float) -> list[Check]:
        from ..ops.doctor.state import database_checks

        return database_checks(Path(config.state_dir))


class _Postgres(StoreBackend):
    """PostgreSQL at ``store.dsn`` (the ``postgres`` extra), which several nodes share."""

    name = "postgres"
    cluster = True

    async def open(self, config: BotdConfig) -> Store:
        dsn = _dsn(config.store)
        try:
            from .postgres import PostgresStore
        except ImportError:
            raise StoreOpenError(POSTGRES_MISSING) from None
        return await PostgresStore.open(dsn, lease_ttl=config.store.lease_ttl)

    async def open_beside(self, config: BotdConfig) -> Store:
        try:
            from .postgres import PostgresStore
        except ImportError:
            raise StoreOpenError(POSTGRES_MISSING) from None
        return await PostgresStore.open(_dsn(config.store), migrating=False)

    def lease_table(self, store: Store) -> LeaseTable:
        return _postgres(store).lease_table()

    def shared_rate(self, store: Store) -> SharedRate | None:
        return _postgres(store).shared_rate()

    def pairing(self, config: BotdConfig, store: Store) -> Pairing:
        return _postgres(store).pairing()  # every node reads the same codes and approvals

    def where(self, config: BotdConfig) -> str:
        from .postgres import describe

        return describe(config.store.dsn or "")

    def known_schema(self) -> int:
        from .postgres import SCHEMA_VERSION

        return SCHEMA_VERSION

    async def doctor(self, config: BotdConfig, timeout: float) -> list[Check]:
        from ..ops.doctor.database import postgres_checks

        return await postgres_checks(_dsn(config.store), timeout)

    async def shared_state(self, config: BotdConfig) -> dict[str, Any] | None:
        """The schema version, the inbox backlog, the pieces not confirmed sent, the pairing
        codes waiting, the leases that stand (``LeaseTable.standing``) and each node, up or
        gone (``botd.cluster.roster.nodes``). ``StoreError`` when it cannot be read."""
        from ..cluster.roster import nodes
        from . import StoreError
        from .postgres import PostgresStore

        store = await PostgresStore.open_reader(_dsn(config.store))
        try:
            try:
                version = await store.schema_version()
                inbox = await store.inbox_backlog()
                pending = await store.outbox_pending_count()
                leases = await store.lease_table().standing()
                waiting = await store.pairing().waiting()
            except Exception as exc:  # an older schema lacks a table, say
                if isinstance(exc, StoreError):
                    raise
                raise StoreError(f"{store.where}: {' '.join(str(exc).split())}") from None
        finally:
            await store.aclose()
        return {
            "schema_version": version,
            "inbox_backlog": inbox.count,
            "inbox_oldest_unanswered_seconds": inbox.oldest_age,
            "outbox_pending": pending,
            "pairing_waiting": len(waiting),
            "leases": [
                {"name": r.name, "holder": r.holder, "epoch": r.epoch, "expires_in": r.expires_in}
                for r in leases
            ],
            "nodes": nodes(leases),
        }


def _dsn(section: StoreSection) -> str:
    assert section.dsn is not None  # the config refuses postgres without one
    return section.dsn


def _postgres(store: Store) -> PostgresStore:
    """``store`` as the PostgreSQL store it is (its leases and pairing)."""
    from .postgres import PostgresStore

    if not isinstance(store, PostgresStore):
        raise TypeError(f"the postgres backend was given a {type(store).__name__}")
    return store


SQLITE: StoreBackend = _Sqlite()
POSTGRES: StoreBackend = _Postgres()


def store_backend(section: StoreSection) -> StoreBackend:
    """The backend ``store.backend`` names."""
    return {SQLITE.name: SQLITE, POSTGRES.name: POSTGRES}[section.backend]
