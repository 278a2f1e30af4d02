"""A throwaway PostgreSQL server for the tests, started by the tests themselves.

The server is Debian's PostgreSQL (``/usr/lib/postgresql/<version>/bin``; ``.ci/run`` installs
the ``postgresql`` package on a machine without it). Its data directory is a fresh temporary
directory, it listens on a free loopback port and on a socket inside that directory, trusts
loopback connections (nothing else can reach it) and does not fsync, so ``initdb`` takes about
a second and a start a fraction of one. ``initdb`` and ``pg_ctl`` refuse to run as root, so as
root they run as the ``postgres`` user, which then owns the directory.

``stop("immediate")`` is what a crashed database server looks like to botd: every connection
is cut and the next start replays the write-ahead log. Each test asks for a database of its
own (``new_database``) so tests stay independent on one server per worker.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Literal

import psycopg

from botd.store.postgres.schema import migrate
from tests.support.health_probe import free_port

SUPERUSER = "botd"


def postgres_bin_dir() -> Path:
    """The newest installed PostgreSQL's programs, or an error that says how to get them."""
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda p: int(re.sub(r"\D", "", p.parent.parent.name) or 0),
    )
    if found:
        return found[-1].parent
    on_path = shutil.which("initdb")
    if on_path:
        return Path(on_path).parent
    raise RuntimeError(
        "PostgreSQL is not installed: the store tests start their own server "
        "(apt-get install postgresql; .ci/run does this)"
    )


class PostgresServer:
    """One running server in its own data directory (see the module docstring)."""

    def __init__(self, root: Path, *, settings: str = "") -> None:
        self.root = root
        self.settings = settings
        """More ``-c name=value`` options for the server (a bench loads pg_stat_statements)."""
        self.data = root / "data"
        self.socket_dir = root / "socket"
        self.port = free_port()
        self.bin = postgres_bin_dir()
        self._as_postgres = os.geteuid() == 0
        self._migrated_made = False

    # -- lifecycle -------------------------------------------------------------------------

    def _run(self, *argv: str) -> None:
        command = [str(self.bin / argv[0]), *argv[1:]]
        if self._as_postgres:
            command = ["runuser", "-u", "postgres", "--", *command]
        result = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            raise RuntimeError(
                f"{argv[0]} failed ({result.returncode}): {result.stderr.strip()[-2000:]}"
            )

    def init(self) -> None:
        self.socket_dir.mkdir(parents=True)
        if self._as_postgres:
            shutil.chown(self.root, "postgres", "postgres")
            shutil.chown(self.socket_dir, "postgres", "postgres")
        self._run(
            "initdb",
            "--no-sync",
            "--auth=trust",
            f"--username={SUPERUSER}",
            "--encoding=UTF8",
            "--locale=C",
            "-D",
            str(self.data),
        )

    def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.socket_dir} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c synchronous_commit=on -c full_page_writes=off "
            f"-c max_connections=200 {self.settings}"
        )
        self._run(
            "pg_ctl", "start", "-w", "-t", "60", "-D", str(self.data), "-l",
            str(self.root / "server.log"), "-o", options,
        )  # fmt: skip

    def stop(self, mode: Literal["fast", "immediate"] = "fast") -> None:
        """Stop the server; ``immediate`` cuts every connection as a crash would."""
        self._run("pg_ctl", "stop", "-w", "-t", "60", "-m", mode, "-D", str(self.data))

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = (self.root / "server.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    # -- databases -------------------------------------------------------------------------

    def dsn(self, database: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def new_database(self, *, template: str = "template0") -> str:
        """A new database on this server, a copy of ``template`` (empty by default); its DSN.

        A copy of a small template is made by copying its files (``FILE_COPY``), which is
        quicker than the write-ahead-logged copy PostgreSQL makes by default; the server does
        not sync them anyway."""
        name = f"t_{uuid.uuid4().hex[:16]}"
        with psycopg.connect(self.dsn(), autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}" STRATEGY FILE_COPY')
        return self.dsn(name)

    def migrated_template(self) -> str:
        """The name of a database on this server holding botd's current schema and nothing
        else, made on first use: a template ``new_database`` copies for tests that open a store
        and are not about migrating one (migrating an empty database costs more than a copy)."""
        name = "botd_migrated"
        if self._migrated_made:
            return name
        with psycopg.connect(self.dsn(), autocommit=True) as admin:
            if admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
                return name
            admin.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
        # botd's migration is async; a fixture may ask for this inside a running event loop,
        # so it runs on a loop of its own in another thread.
        with ThreadPoolExecutor(1) as thread:
            thread.submit(asyncio.run, _migrated(self.dsn(name))).result()
        self._migrated_made = True
        return name

    def drop_database(self, dsn: str) -> None:
        """Drop a database ``new_database`` made, cutting whatever is still connected to it.

        A test's database is dropped when it ends: a worker runs hundreds of tests, and the
        files of hundreds of databases (about 10 MB each, never synced) made removing the
        data directory at the end take minutes."""
        name = dsn.rsplit("/", 1)[1]
        with psycopg.connect(self.dsn(), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def _migrated(dsn: str) -> None:
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        await migrate(conn, "template")


@contextmanager
def running_postgres(*, settings: str = "") -> Iterator[PostgresServer]:
    """A fresh server for the duration of the block (``settings``: more ``-c`` options),
    its directory removed after."""
    root = Path(tempfile.mkdtemp(prefix="botd-pg-"))
    server = PostgresServer(root, settings=settings)
    try:
        server.init()
        server.start()
        try:
            yield server
        finally:
            with suppress(RuntimeError):  # already stopped by the test
                server.stop("immediate")
    finally:
        shutil.rmtree(root, ignore_errors=True)
