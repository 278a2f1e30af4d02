"""Test-wide settings and fixtures.

Hypothesis explores new random examples on every local run, which is how it finds bugs; in
CI (``CI`` set) it is derandomized so that a run is reproducible and a red build always
means a change, not a lucky draw.
"""

from __future__ import annotations

import functools
import logging
import os
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from hypothesis import settings
from xdist.scheduler import LoadScopeScheduling

import botd.ops.logging as botd_logging
from botd.store import Store
from botd.store.postgres import PostgresStore
from botd.store.sqlite import SqliteStore
from tests.fakes.anthropic_api import FakeAnthropicAPI
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.chat import Chat, chatting
from tests.support.npm_packages import installed
from tests.support.pg_databases import DatabaseSupply
from tests.support.pg_server import PostgresServer, running_postgres

settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("dev", print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


SEVERAL_NODES = Path(__file__).parent / "cluster"
"""The tests that run clusters of botd nodes (three daemons and a database each)."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The cluster tests first, so that their one long share of the suite (``OneClusterAtATime``)
    starts at once instead of coming last on its worker; then the install tests (a minute
    each: a wheel built and installed), which at their place in the alphabet came last and
    kept the suite waiting for them."""

    def rank(item: pytest.Item) -> int:
        if SEVERAL_NODES in item.path.parents:
            return 0
        return 1 if item.get_closest_marker("install") is not None else 2

    items.sort(key=rank)  # stable: each part keeps its order


class OneClusterAtATime(LoadScopeScheduling):  # type: ignore[misc]
    """xdist's scheduling for ``--dist loadgroup``: the cluster tests are one unit of work,
    run by one worker one after the other, and every other test a unit of its own (a cluster
    module marked ``no_nodes`` too: it starts no node).

    Each cluster test stands for several machines, with leases of a couple of seconds: two or
    three of them at once on two cores starved their nodes of the CPU past those leases (a
    live node's renewal late, its leases lost), which no cluster of real machines sees.
    (xdist's own ``xdist_group`` marks the group in the test's id, which pytest 9 no longer
    lets a plugin change.)"""

    def _split_scope(self, nodeid: str) -> str:
        module = nodeid.split("::", 1)[0]
        if module.startswith("tests/cluster/") and not starts_no_nodes(module):
            return "several_nodes"
        return nodeid


@functools.cache
def starts_no_nodes(module: str) -> bool:
    """Whether the test module at ``module`` (a path from the checkout) is marked as
    starting no botd node (``pytestmark = pytest.mark.no_nodes``): the leases, holding and
    fencing logic on their own, whose tests need not wait for the clusters' turn. Read from
    its source, since the scheduler sees only test ids."""
    source = (Path(__file__).parent.parent / module).read_text(encoding="utf-8")
    return re.search(r"^pytestmark = pytest\.mark\.no_nodes$", source, re.MULTILINE) is not None


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    if config.getvalue("dist") == "loadgroup":
        return OneClusterAtATime(config, log)
    return None


@pytest.fixture(autouse=True)
def _loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every fake server is on loopback: no proxy from the environment may sit in between,
    and no token or model key from the operator's shell may reach a test."""
    for name in list(os.environ):
        if name.lower().endswith("_proxy") or name.startswith(("ANTHROPIC_", "OPENAI_")):
            monkeypatch.delenv(name)
    monkeypatch.delenv("TELEGRAM_BOT_TOKEN", raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


@pytest.fixture(autouse=True)
def _secrets_registered_per_test(monkeypatch: pytest.MonkeyPatch) -> None:
    """Secrets a test registers for masking (a daemon run in-process registers its config's)
    are forgotten after it, so no test's output depends on which ran before it."""
    monkeypatch.setattr(botd_logging, "_literal_secrets", set())
    monkeypatch.setattr(botd_logging, "_literal_pattern", None)


@pytest.fixture(autouse=True)
def _logger_levels_restored() -> Iterator[None]:
    """Every logger's level as it was before the test, after it: a level a test (or a daemon
    run in-process) set on ``botd`` or one of its loggers would change what the next test
    on that worker logs (seen when the workers took the tests in another order)."""
    loggers = logging.root.manager.loggerDict
    levels = {
        name: logger.level for name, logger in loggers.items() if isinstance(logger, logging.Logger)
    }
    yield
    for name, logger in list(loggers.items()):
        if isinstance(logger, logging.Logger) and logger.level != levels.get(name, logging.NOTSET):
            logger.setLevel(levels.get(name, logging.NOTSET))


STORE_BACKENDS = ["sqlite", "postgres"]
"""The backends every test of the ``store`` fixture runs on: a test that is not about one
backend asks for ``store`` and runs on both (asking only the protocols of ``botd.store``)."""


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[SqliteStore]:
    """A fresh SQLite store of its own (``tmp_path/store``, apart from any daemon's
    ``tmp_path/state``), closed after the test: for the tests about the SQLite backend itself,
    or that read it without awaiting (its in-memory answers)."""
    with SqliteStore.open(tmp_path / "store") as opened:
        yield opened


@pytest.fixture(params=STORE_BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """A fresh store on each backend (SQLite in ``tmp_path/store``; PostgreSQL in a migrated
    database of the test's own on the worker's server), as the protocol ``Store``; closed
    after."""
    opened: Store
    if request.param == "postgres":
        opened = await PostgresStore.open(request.getfixturevalue("migrated_postgres_dsn"))
    else:
        opened = SqliteStore.open(tmp_path / "store")
    try:
        yield opened
    finally:
        await opened.aclose()


@pytest.fixture
async def chat(tmp_path: Path) -> AsyncIterator[Chat]:
    """A DM with botd over the real Telegram SDK and the loopback Bot API
    (``tests/support/chat.py``)."""
    async with FakeTelegramAPI() as telegram, chatting(tmp_path, telegram) as dm:
        yield dm


@pytest.fixture
async def telegram() -> AsyncIterator[FakeTelegramAPI]:
    """A loopback Bot API (the fake Telegram, its default token) for the test."""
    async with FakeTelegramAPI() as api:
        yield api


@pytest.fixture
async def model() -> AsyncIterator[FakeAnthropicAPI]:
    """A loopback Anthropic API (the fake model) whose key is ``sk-ant-test``."""
    async with FakeAnthropicAPI(api_key="sk-ant-test") as api:
        yield api


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One throwaway PostgreSQL server per test worker (``tests/support/pg_server.py``), started on
    first use; tests that stop it start it again before they end."""
    with running_postgres() as server:
        yield server


@pytest.fixture(scope="session")
def postgres_databases(postgres_server: PostgresServer) -> Iterator[DatabaseSupply]:
    """The worker's databases, made ahead and dropped behind (``tests/support/pg_databases.py``)."""
    supply = DatabaseSupply(postgres_server)
    yield supply
    supply.close()


@pytest.fixture
def postgres_dsn(postgres_databases: DatabaseSupply) -> Iterator[str]:
    """A new empty database of the test's own on the worker's server, dropped after the test."""
    dsn = postgres_databases.take()
    yield dsn
    postgres_databases.give_back(dsn)


@pytest.fixture
def migrated_postgres_dsn(
    postgres_server: PostgresServer, postgres_databases: DatabaseSupply
) -> Iterator[str]:
    """Like ``postgres_dsn``, but the database already holds botd's current schema (a copy of
    the worker's migrated template): for tests that open a store and are not about migrating
    one. Opening a store on it finds nothing to migrate."""
    dsn = postgres_databases.take(postgres_server.migrated_template())
    yield dsn
    postgres_databases.give_back(dsn)


@pytest.fixture(scope="session")
def claude_code_acp() -> Path:
    """The entry point of ``@zed-industries/claude-code-acp`` (Claude Code's ACP adapter,
    the ACP agent botd drives in ``tests/agent/acp``), installed once from its pinned set in
    ``tests/support/npm``."""
    package = installed("claude-code-acp") / "node_modules" / "@zed-industries" / "claude-code-acp"
    return package / "dist" / "index.js"
