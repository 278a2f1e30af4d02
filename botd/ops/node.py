"""What ``/healthz`` and ``botd status`` say about this node: its id, the store's backend,
the database (named without its password; reachable or not, its schema version and the one
this botd knows) and the leases the node holds (none shown on a node alone, whose leases
never lapse: they say nothing of its health, and it holds one per conversation it ever ran).

The database is probed at each ``/healthz`` (``NodeHealth.probe``), with a short wait: a
store whose writes all succeeded can still have lost its server a moment ago, and only a
read says so before the next write fails. A database that cannot be read is the store's
problem line (so ``/healthz`` answers 503 with the reason); the next probe that reads it
again clears it, without a restart. A schema newer than this botd knows (a newer node
migrated it during a rolling upgrade) is shown, not a problem: this node keeps working
(migrations only add), but cannot start again until it is upgraded.

On several nodes the probe also reads the leases that stand, and the node shows the others
(``botd.cluster.roster``): each node up (with what it holds) or gone (for how long), and for
each channel whose input one node takes at a time (``LeasedInput``) whether this node holds
it, stands by for another, or nobody holds it. Nobody holding a channel's input for longer
than ``health.down_after`` is a problem line: no node takes that channel's messages.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..cluster.leases import LeaseKeeper, LeaseRow
from ..cluster.roster import channel_inputs, nodes
from ..store import StoreError, StoreStatus
from .outages import span

log = logging.getLogger(__name__)

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
    schema_known: int | None = None
    """The schema version this botd's code knows."""

    @property
    def reachable(self) -> bool:
        return self.reason is None

    def as_json(self) -> dict[str, Any]:
        return {
            "where": self.where,
            "reachable": self.reachable,
            "schema_version": self.schema_version,
            "schema_known": self.schema_known,
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
        schema_known: int | None = None,
        inputs: Callable[[], Mapping[str, Sequence[str]]] = dict,
        wait: float = PROBE_WAIT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``schema_known``: the schema version this botd knows; ``inputs``: each channel's
        input leases (``LeasedInput.input_leases``), as the adapters say now."""
        self.node_id = node_id
        self.backend = backend
        self._store = store
        self._leases = leases
        self._schema_known = schema_known
        self._inputs = inputs
        self._wait = wait
        self._clock = clock
        self.database: DatabaseState | None = None
        """What the last probe found (None: not probed yet)."""
        self._standing: list[LeaseRow] | None = None
        """The leases that stood at the last probe (None: not read, or a node alone)."""

    async def probe(self) -> DatabaseState:
        """Read the database's schema version now (and, on several nodes, the leases that
        stand); the state it is in."""
        where = self._store.where
        try:
            version = await self._store.probe(self._wait)
        except StoreError as exc:
            state = DatabaseState(where, None, _without_where(exc, where), self._schema_known)
        else:
            state = DatabaseState(where, version, None, self._schema_known)
        self.database = state
        self._standing = await self._read_standing() if state.reachable else None
        return state

    async def _read_standing(self) -> list[LeaseRow] | None:
        if not self._leases.lapses:  # a node alone: nobody else, nothing to stand by for
            return None
        try:
            async with asyncio.timeout(self._wait):
                return await self._leases.table.standing()
        except Exception as exc:  # gone since the probe: the next probe says so
            log.debug("the leases could not be read: %s", exc)
            return None

    def problems(self, unheld_after: float) -> dict[str, str]:
        """Each channel whose input no node has held for longer than ``unheld_after``
        seconds (by the last probe), as ``/healthz``'s components: ``channel <name>`` ->
        ``no node holds <lease> for 42 s``."""
        found: dict[str, str] = {}
        for channel, states in self._channel_inputs().items():
            for state in states:
                seconds = state["seconds"]
                if state["state"] == "unheld" and seconds is not None and seconds > unheld_after:
                    found[f"channel {channel}"] = (
                        f"no node holds {state['lease']} for {span(seconds)}"
                    )
        return found

    def _channel_inputs(self) -> dict[str, list[dict[str, Any]]]:
        if self._standing is None:
            return {}
        return channel_inputs(self._standing, self._inputs(), self.node_id)

    def view(self) -> dict[str, Any]:
        """The node as the ``node`` object of ``/healthz``: ``id``, ``backend``, ``database``
        (``where``, ``reachable``, ``schema_version``, ``schema_known``, ``reason``),
        ``leases`` (each held lease's ``name``, ``epoch`` and ``seconds_left``, by this node's
        own deadline; none when they never lapse), and on several nodes, by the last probe,
        ``nodes`` and ``inputs`` (``botd.cluster.roster``; null when not read)."""
        now = self._clock()
        held = self._leases.held() if self._leases.lapses else []
        view: dict[str, Any] = {
            "id": self.node_id,
            "backend": self.backend,
            "database": None if self.database is None else self.database.as_json(),
            "leases": [
                {"name": lease.name, "epoch": lease.epoch, "seconds_left": lease.valid_for(now)}
                for lease in sorted(held, key=lambda lease: lease.name)
            ],
        }
        if self._leases.lapses:
            standing = self._standing
            view["nodes"] = None if standing is None else nodes(standing)
            view["inputs"] = None if standing is None else self._channel_inputs()
        return view


def _without_where(exc: Exception, where: str) -> str:
    """A store error's words without the database's name in front (it is shown apart)."""
    text = str(exc)
    return text.removeprefix(f"{where}: ") or text
