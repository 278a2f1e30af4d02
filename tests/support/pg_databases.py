"""Databases for the tests, made before they are asked for and dropped after the test has gone.

Every PostgreSQL-backed test has a database of its own on its worker's server. Making one
(``CREATE DATABASE``) and dropping it take 50–200 ms of the server's time each, mostly waiting
for checkpoints; a thousand tests paid that in line. A ``DatabaseSupply`` keeps a couple of
databases of each template made ahead by a thread of its own while the tests run, and drops
the databases tests have finished with on that thread too, so a test finds its database ready
and leaves without waiting.

A test may stop the server (an outage) and start it again; while it is down the thread's work
fails, is given up for that round, and the test that asks next makes its database itself.
"""

from __future__ import annotations

import queue
import threading
from contextlib import suppress

import psycopg

from tests.support.pg_server import PostgresServer

AHEAD = 2
"""Databases of each template kept made ahead: one for the test being set up, one spare."""


class DatabaseSupply:
    """Databases made ahead on one server, per template, and dropped behind (module docstring)."""

    def __init__(self, server: PostgresServer) -> None:
        self.server = server
        self._ready: dict[str, queue.Queue[str]] = {}
        self._wanted: queue.Queue[str | None] = queue.Queue()
        self._finished: queue.Queue[str] = queue.Queue()
        self._worker = threading.Thread(target=self._work, name="test-databases", daemon=True)
        self._worker.start()

    def take(self, template: str = "template0") -> str:
        """A new database copied from ``template``, for a test's own use; its DSN."""
        ready = self._ready.setdefault(template, queue.Queue())
        try:
            dsn = ready.get_nowait()
        except queue.Empty:
            dsn = self.server.new_database(template=template)
            for _ in range(AHEAD):
                self._wanted.put(template)
        else:
            self._wanted.put(template)
        return dsn

    def give_back(self, dsn: str) -> None:
        """The test that had ``dsn`` is over: drop it soon, on the supply's thread."""
        self._finished.put(dsn)

    def close(self) -> None:
        """Stop the thread (what it holds is removed with the server's directory)."""
        self._wanted.put(None)
        self._worker.join(timeout=30)

    def _work(self) -> None:
        while True:
            with suppress(queue.Empty):
                while True:
                    finished = self._finished.get_nowait()
                    with suppress(psycopg.Error):
                        self.server.drop_database(finished)
            try:
                template = self._wanted.get(timeout=0.2)
            except queue.Empty:
                continue
            if template is None:
                return
            with suppress(psycopg.Error):
                self._ready[template].put(self.server.new_database(template=template))
