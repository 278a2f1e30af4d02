"""What ``/healthz`` and ``botd status`` say about this node: its id, the store's backend,
the database (named without its password; reachable or not, its schema version) and the
leases the node holds (none shown on a node alone, whose leases never lapse: they say
nothing of its health, and it holds one per conversation it ever ran).

The database is probed at each ``/healthz`` (``NodeHealth.probe``), with a short wait: a
store whose writes all succeeded can still have lost its server a moment ago, and only a
read says so before the next write fails. A database that cannot be read is the store's
problem line (so ``/healthz`` answers 503 with the reason); the next probe that reads it
again clears it, without a restart.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..cluster.leases import LeaseKeeper
from ..store import StoreError, StoreStatus

PROBE_WAIT = 1.5
"""Seconds the probe waits for a connection to the database (``/healthz`` must answer
within ``botd status``'s own wait, 5 s)."""

__all__ = ["PROBE_WAIT", "DatabaseState", "NodeHealth"]


@dataclass(frozen=True, slots=True)
class DatabaseState:
    """The database as the last probe found it."""

    where: str
    schema_version: int | None
    reason: str | None = None
    """Why it could not be read (None: it was)."""

    @property
    def reachable(self) -> bool:
        return self.reason is None

    def as_json(self) -> dict[str, Any]:
        return {
            "where": self.where,
            "reachable": self.reachable,
            "schema_version": self.schema_version,
            "reason": self.reason,
        }


class NodeHealth:
    """This node as ``/healthz`` shows it (see the module docstring)."""

    def __init__(
        self,
        node_id: str,
        backend: str,
        store: StoreStatus,
        leases: LeaseKeeper,
        *,
        wait: float = PROBE_WAIT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.node_id = node_id
        self.backend = backend
        self._store = store
        self._leases = leases
        self._wait = wait
        self._clock = clock
        self.database: DatabaseState | None = None
        """What the last probe found (None: not probed yet)."""

    async def probe(self) -> DatabaseState:
        """Read the database's schema version now; the state it is in."""
        try:
            version = await self._store.probe(self._wait)
        except StoreError as exc:
            state = DatabaseState(self._store.where, None, _without_where(exc, self._store.where))
        else:
            state = DatabaseState(self._store.where, version)
        self.database = state
        return state

    def view(self) -> dict[str, Any]:
        """The node as the ``node`` object of ``/healthz``: ``id``, ``backend``, ``database``
        (``where``, ``reachable``, ``schema_version``, ``reason``) and ``leases`` (each held
        lease's ``name``, ``epoch`` and ``seconds_left``, by this node's own deadline; none
        when they never lapse)."""
        now = self._clock()
        held = self._leases.held() if self._leases.lapses else []
        return {
            "id": self.node_id,
            "backend": self.backend,
            "database": None if self.database is None else self.database.as_json(),
            "leases": [
                {"name": lease.name, "epoch": lease.epoch, "seconds_left": lease.valid_for(now)}
                for lease in sorted(held, key=lambda lease: lease.name)
            ],
        }


def _without_where(exc: Exception, where: str) -> str:
    """A store error's words without the database's name in front (it is shown apart)."""
    text = str(exc)
    return text.removeprefix(f"{where}: ") or text
