"""Leases: which node does a thing that only one node may do at a time.

A lease is a named row (``conversation:<key>``, ``telegram:<account>``, ``scheduler``) with a
holder, an **epoch** and an expiry kept by the database's clock. It is

* **claimed** only when it has expired (or was never held), and each claim takes the next
  epoch, so two holders of one name never share an epoch;
* **renewed** by its holder well before it expires (every third of the TTL; a renewal that
  failed is tried again a twelfth of the TTL later), in one statement for every lease the
  node holds, and only while it has not expired: a node that was paused past its expiry
  cannot renew it back, even if nobody claimed it meanwhile;
* **released by expiring** (its expiry set to now), never by deleting the row, so the epoch
  keeps counting up.

Why not a session advisory lock: a paused process (SIGSTOP, a VM frozen for migration) keeps
its connection and so its lock, and TCP keepalive does not notice. A lease runs out by itself.

The node's own view of a lease is its **deadline**: the local monotonic time at which it sent
the request that set the expiry, plus the TTL. The database set the expiry from its clock at
a moment after that request left, so the deadline is never later than the expiry the database
holds, whatever the clocks say. Work that must not outlive the lease (a send to the platform)
is not started past the deadline; every write of a fenced run checks holder and epoch in its
own transaction (the backend's fence), so a stale holder's write fails even if it raced.

``LeaseKeeper`` holds one node's leases: claims, renews them in the background, and marks a
lease lost (``Lease.lose``: ``lost`` set, ``why`` said) when it could not renew it before its
deadline. A conversation's loss is logged by the dispatcher that held it, once; any other
lease's by the keeper.

A node alone (the SQLite backend, whose state-dir lock keeps a second process out) claims
from an in-process table (``ProcessLeases``) with an infinite TTL (``LeaseKeeper.alone``):
no other node can take a lease from it, so its leases never lapse (``lapses``): nothing is
renewed, and a long pause (a busy loop, a stop of the process) cuts no work.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

log = logging.getLogger(__name__)


CONVERSATION_LEASE = "conversation:"
"""A conversation's lease is named ``conversation:<conversation key>``."""


NODE_LEASE = "node:"
"""A running node holds ``node:<node_id>``: on a shared database, what the state dir's lock is
on one machine (one process per name)."""


class NodeInUse(Exception):
    """Another running process holds this node's own lease: it has the same ``node_id``."""


class LeaseLost(Exception):
    """A fenced write found its lease expired or held by another epoch, or a send was due
    past the lease's deadline: the write or send is not made and the work it belonged to
    stops (its entries stay as they are for the next holder)."""


@dataclass(frozen=True)
class LeaseRow:
    """A lease as the table holds it (what ``botd status`` shows)."""

    name: str
    holder: str
    epoch: int
    expires_in: float
    """Seconds until it expires by the table's clock; zero or less when expired."""


class LeaseTable(Protocol):
    """Where the leases live: the shared database, or one process's memory."""

    async def claim(self, name: str, holder: str, ttl: float) -> int | None:
        """The new epoch if ``name`` was free or expired, else None."""
        ...

    async def renew(self, holder: str, held: Mapping[str, int], ttl: float) -> set[str]:
        """Extend each of ``held`` (name -> epoch) still held unexpired by ``holder``; the
        names renewed."""
        ...

    async def expire(self, name: str, holder: str, epoch: int) -> None:
        """Give the lease up: its expiry becomes now (the row and its epoch stay)."""
        ...

    async def rows(self) -> list[LeaseRow]:
        """Every lease, held or not."""
        ...

    async def standing(self) -> list[LeaseRow]:
        """The leases that say who is up and who holds what (``botd.cluster.roster``): every
        lease but a conversation's that no node holds now (those are one per conversation
        ever answered)."""
        ...

    async def holder(self, name: str) -> str | None:
        """Who holds ``name`` unexpired now (None: nobody); its row alone is read."""
        ...


class Flag:
    """Set once, and awaited: an ``asyncio.Event``'s ``is_set``, ``set`` and ``wait``, whose
    waiting machinery is made only when something waits (a node holds a lease per
    conversation it runs, most of them never watched: on one node, a few hundred bytes
    each)."""

    __slots__ = ("_event", "_set")

    def __init__(self) -> None:
        self._set = False
        self._event: asyncio.Event | None = None

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        self._set = True
        if self._event is not None:
            self._event.set()

    async def wait(self) -> bool:
        if not self._set:
            if self._event is None:
                self._event = asyncio.Event()
            await self._event.wait()
        return True


@dataclass(eq=False, slots=True)
class Lease:
    """This node's hold on one lease."""

    name: str
    epoch: int
    deadline: float
    """Local monotonic time past which the lease may belong to another node."""
    lost: Flag = field(default_factory=Flag)
    """Set when the lease ended without this node giving it up (renewal failed)."""
    why: str = ""
    """Why it was lost, in a few words (``lose``)."""

    def lose(self, why: str) -> bool:
        """Mark the lease lost for ``why``; False if it was lost already (the first reason
        stays)."""
        if self.lost.is_set():
            return False
        self.why = why
        self.lost.set()
        return True

    def valid_for(self, now: float) -> float:
        """Seconds of the lease left at monotonic time ``now`` (zero once lost)."""
        return 0.0 if self.lost.is_set() else max(0.0, self.deadline - now)


class LeaseKeeper:
    """One node's leases: claim, background renewal, loss, release (see the module docstring).

    ``run`` is the renewal loop; its owner runs it as a task for the node's lifetime."""

    def __init__(
        self,
        table: LeaseTable,
        node_id: str,
        ttl: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if ttl <= 0:
            raise ValueError("a lease's TTL must be positive")
        self.table = table
        self.node_id = node_id
        self.ttl = ttl
        self._clock = clock
        self._sleep = sleep
        self._held: dict[str, Lease] = {}
        self._renewed_at: float | None = None
        """When the last renewal that was answered was sent (local monotonic time)."""
        self.inputs: dict[str, str] = {}
        """The leases of the inputs this node runs that one node takes at a time (a
        Telegram poller, a Discord shard: ``botd.cluster.holding``), held or not, each with
        its role (``poller``, ``gateway``)."""
        self._nodes_up: tuple[float, int] | None = None
        self._request: asyncio.Task[set[str]] | None = None
        """The last renewal request sent to the table, until it is answered (``_renewed``)."""

    @classmethod
    def alone(cls, node_id: str) -> LeaseKeeper:
        """The keeper of a node alone with its leases: the in-process table, leases that
        never lapse (see the module docstring)."""
        return cls(ProcessLeases(), node_id, math.inf)

    @property
    def lapses(self) -> bool:
        """Whether a lease runs out unless renewed (False: an infinite TTL, ``alone``)."""
        return math.isfinite(self.ttl)

    @property
    def renew_every(self) -> float:
        return self.ttl / 3

    def held(self) -> list[Lease]:
        return list(self._held.values())

    def inputs_held(self) -> dict[str, str]:
        """The ``inputs`` this node holds now, with their roles, sorted by name."""
        return {name: self.inputs[name] for name in sorted(self.inputs) if name in self._held}

    async def nodes_up(self) -> int:
        """How many nodes are up (their own leases standing), read from the table at most
        once a renewal period; 1 when it cannot be read or no node lease is held (a node
        alone, a test's keeper)."""
        now = asyncio.get_running_loop().time()  # a cache's age, not a lease's deadline
        if self._nodes_up is not None and now - self._nodes_up[0] < self.renew_every:
            return self._nodes_up[1]
        try:
            rows = await self.table.standing()
        except Exception:
            return 1
        up = max(1, sum(row.name.startswith(NODE_LEASE) and row.expires_in > 0 for row in rows))
        self._nodes_up = (now, up)
        return up

    def holding(self, name: str) -> Lease | None:
        return self._held.get(name)

    async def try_claim(self, name: str) -> Lease | None:
        """The lease if this node could claim it now; None while another node holds it (or
        this node already does)."""
        if name in self._held:
            return None
        sent = self._clock()
        epoch = await self.table.claim(name, self.node_id, self.ttl)
        if epoch is None:
            return None
        lease = Lease(name, epoch, sent + self.ttl)
        self._held[name] = lease
        # A node alone claims one per conversation it runs: nothing an operator follows.
        (log.info if self.lapses else log.debug)("lease %s claimed (epoch %d)", name, epoch)
        return lease

    async def release(self, lease: Lease) -> None:
        """Give ``lease`` up so another node may claim it at once."""
        if self._held.get(lease.name) is not lease:
            return
        del self._held[lease.name]
        if not lease.lost.is_set():
            lease.deadline = self._clock()
            await self.table.expire(lease.name, self.node_id, lease.epoch)

    async def release_all(self) -> None:
        for lease in self.held():
            try:
                await self.release(lease)
            except Exception as exc:  # the database is away: the lease runs out by itself
                log.warning("lease %s not released (%s); it expires by itself", lease.name, exc)

    async def renew_once(self) -> bool:
        """Renew every held lease in one request; mark lost what was not renewed or whose
        deadline passed while the request failed. False when the request failed."""
        for lease in self.held():
            if lease.lost.is_set():  # given up by its work (a send found it past its deadline)
                self._lose(lease, "given up past its deadline")
        if not self._held:
            self._renewed_at = None
            return True
        sent = self._clock()
        held = dict(self._held)
        try:
            # A renewal that hangs (a database that stopped answering) must not outlast
            # the next one: the deadlines are checked when it gives up.
            async with asyncio.timeout(self.renew_every):
                renewed = await self._renewed({name: lease.epoch for name, lease in held.items()})
        except Exception as exc:
            now = self._clock()
            reason = str(exc) or f"no answer within {self.renew_every:.2g} s"
            for lease in self._still_held(held):
                if now >= lease.deadline:
                    self._lose(lease, f"not renewed before its deadline ({reason})")
            log.debug("renewing %d lease(s) failed after %.2f s: %s", len(held), now - sent, reason)
            return False
        for lease in self._still_held(held):
            name = lease.name
            if name in renewed:
                lease.deadline = sent + self.ttl
            else:
                self._lose(lease, "taken over or expired before it was renewed")
        previous, self._renewed_at = self._renewed_at, sent
        if previous is not None and sent - previous > self.ttl / 2:
            # Due every third of the TTL: past half of it, the margin is mostly gone.
            log.warning(
                "leases renewed %.1f s after the previous renewal (they last %g s): this "
                "node's event loop or the database is slow",
                sent - previous,
                self.ttl,
            )
        return True

    async def _renewed(self, epochs: Mapping[str, int]) -> set[str]:
        """The table's answer to a renewal of ``epochs``. A request once sent is never
        cancelled: a renewal that gives up (its timeout, the node stopping) stops waiting
        and leaves the request to finish, and the next renewal waits for it before sending
        its own. A PostgreSQL query cancelled while psycopg was still cancelling it after an
        earlier interruption made psycopg close the connection under the running request,
        and a node stopping so crashed (SIGSEGV) at its exit."""
        earlier = self._request
        if earlier is not None and not earlier.done():
            with contextlib.suppress(Exception):  # its answer is stale; only its end matters
                await asyncio.shield(earlier)
        request = asyncio.ensure_future(self.table.renew(self.node_id, epochs, self.ttl))
        request.add_done_callback(_answered)
        self._request = request
        return await asyncio.shield(request)

    def _still_held(self, sent: Mapping[str, Lease]) -> list[Lease]:
        """The leases of a renewal's request that are still held now it is answered: one
        released meanwhile (its work ended, the node stopping) was given up, not lost, even
        though the renewal, which went out before the release, found it expired."""
        return [lease for name, lease in sent.items() if self._held.get(name) is lease]

    def _lose(self, lease: Lease, why: str) -> None:
        if self._held.get(lease.name) is lease:
            del self._held[lease.name]
        if lease.lose(why):
            # A conversation's loss is told once, with this reason, by the dispatcher that
            # held it (``conversation.dispatcher``); any other lease's here.
            quiet = lease.name.startswith(CONVERSATION_LEASE)
            (log.debug if quiet else log.warning)(
                "lease %s (epoch %d) lost: %s", lease.name, lease.epoch, why
            )

    async def run(self) -> None:
        """Renew every third of the TTL until cancelled; leases are not released here (the
        owner calls ``release_all`` at a clean stop). Leases that never lapse need nothing:
        it returns at once.

        A renewal that failed (the database slow or away) is tried again a twelfth of the
        TTL later, not a third: one slow answer must not use up the margin, since the next
        regular renewal would then be due about when the leases run out."""
        renewed = True
        while self.lapses:
            pause = self.renew_every if renewed else self.renew_every / 4
            await self._sleep(pause)
            renewed = await self.renew_once()


def _answered(request: asyncio.Task[set[str]]) -> None:
    """Takes a renewal request's failure, so that one nobody waited for any more (given up
    by its renewal) is not reported as never retrieved: the renewal that waited logged it."""
    if not request.cancelled():
        request.exception()


class ProcessLeases:
    """The lease table of a node that is the only one (the SQLite backend, whose state-dir
    lock already keeps a second process out): the same contract, kept in memory. Such a
    node claims with an infinite TTL (``LeaseKeeper.alone``); with a finite one the table
    lapses as the database's does."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._rows: dict[str, tuple[str, int, float]] = {}

    async def claim(self, name: str, holder: str, ttl: float) -> int | None:
        now = self._clock()
        row = self._rows.get(name)
        if row is not None and row[2] > now:
            return None
        epoch = (row[1] if row else 0) + 1
        self._rows[name] = (holder, epoch, now + ttl)
        return epoch

    async def renew(self, holder: str, held: Mapping[str, int], ttl: float) -> set[str]:
        now = self._clock()
        renewed = set()
        for name, epoch in held.items():
            row = self._rows.get(name)
            if row is not None and row[:2] == (holder, epoch) and row[2] > now:
                self._rows[name] = (holder, epoch, now + ttl)
                renewed.add(name)
        return renewed

    async def expire(self, name: str, holder: str, epoch: int) -> None:
        row = self._rows.get(name)
        if row is not None and row[:2] == (holder, epoch):
            self._rows[name] = (holder, epoch, self._clock())

    async def rows(self) -> list[LeaseRow]:
        now = self._clock()
        return [
            LeaseRow(name, holder, epoch, expires - now)
            for name, (holder, epoch, expires) in sorted(self._rows.items())
        ]

    async def standing(self) -> list[LeaseRow]:
        return [
            row
            for row in await self.rows()
            if row.expires_in > 0 or not row.name.startswith(CONVERSATION_LEASE)
        ]

    async def holder(self, name: str) -> str | None:
        row = self._rows.get(name)
        return row[0] if row is not None and row[2] > self._clock() else None


async def hold_node(leases: LeaseKeeper, *, clock: Callable[[], float] = time.monotonic) -> Lease:
    """Claim this node's own lease (``NODE_LEASE``), so that a second process started with
    the same ``node_id`` is refused, as a second daemon on one state dir is. A process of
    this node that was just killed holds it until it runs out: a restart waits up to one TTL
    for it before giving up with ``NodeInUse``."""
    name = NODE_LEASE + leases.node_id
    deadline = clock() + leases.ttl + 1.0
    told = False
    while (lease := await leases.try_claim(name)) is None:
        if clock() >= deadline:
            raise NodeInUse(
                f"store.node_id {leases.node_id!r} is in use: another botd runs as "
                f"{leases.node_id!r} on this database; give each node its own node_id"
            )
        if not told:
            log.info(
                "lease %s is held (another process as this node, or one just killed): "
                "waiting up to %g s for it",
                name,
                leases.ttl,
            )
            told = True
        await asyncio.sleep(min(0.5, leases.ttl / 3))
    return lease


__all__ = [
    "CONVERSATION_LEASE",
    "NODE_LEASE",
    "Flag",
    "Lease",
    "LeaseKeeper",
    "LeaseLost",
    "LeaseRow",
    "LeaseTable",
    "NodeInUse",
    "ProcessLeases",
    "hold_node",
]
