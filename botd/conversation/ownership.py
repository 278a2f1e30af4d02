"""Cluster mode (the PostgreSQL backend): which node runs a conversation, and how its
messages reach that node.

A conversation is owned by the node holding its lease ``conversation:<key>``
(``botd.cluster.leases``), and its inbox is the only way in: any node accepts a message
(``Store.accept_inbound``), then ``arrived`` either pulls it (this node owns the
conversation) or signals the arrival (``NOTIFY``) so that the owner pulls it. A node that
hears of an arrival for a conversation nobody owns tries to claim it, after waiting 50 ms for
each conversation it is busy with, so the least busy node tends to win (the node that
accepted is not favoured: with Telegram polling every message arrives on the poller's node,
and the runs must spread).

* **pull**: the conversation's ``accepted`` entries past the last one this node took, in
  ``seq`` (commit) order, handed to ``Conversations.submit`` one by one, one pull at a time
  per conversation. Chat commands are entries too, so ``/stop`` accepted anywhere reaches
  the owner.
* **takeover**: a claim is a restart of that one conversation
  (``Conversations.resume_conversation``): an interrupted run goes on from its last finished
  step, the old run's pieces are superseded or sent again keyed, unconfirmed pieces of
  finished runs are sent, then it pulls.
* **fencing**: everything the conversation does runs under its lease (``fencing.fenced``):
  its writes are made only while the lease holds and no send starts within ``margin`` of
  the lease's end. A lease lost (not renewed in time, or given up by a send) cuts the
  conversation's work, marking nothing, and drops it from memory; whoever claims it next
  (this node too, with a new epoch) resumes it from the store.
* **idle**: a conversation with nothing running or waiting for a TTL releases its lease
  and leaves memory, so a dead node's idle conversations do not hold up new messages.
* **polling**: arrivals are only a hint (a node away from the database misses them). Every
  ``min(ttl / 3, 2 s)`` the claimer claims conversations with unfinished entries and no
  live lease (an accept whose commit reply was cut is among them: it is ``accepted``), and
  pulls owned conversations with accepted entries not taken yet.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field

from ..chat import InboundMessage
from ..cluster import fencing
from ..cluster.fencing import Fence
from ..cluster.leases import CONVERSATION_LEASE, Lease, LeaseKeeper
from ..store.protocols import ConversationInbox
from .registry import Conversations
from .tasks import TaskOwner

log = logging.getLogger(__name__)

BUSY_DELAY = 0.05
"""Seconds a node waits before claiming, per conversation it is busy with."""
MAX_POLL = 2.0


def lease_name(conversation_key: str) -> str:
    return CONVERSATION_LEASE + conversation_key


@dataclass(eq=False)
class Owned:
    """A conversation this node holds the lease of."""

    key: str
    fence: Fence
    taken: int = 0
    """The ``seq`` of the last entry handed to the conversation."""
    active_at: float = field(default_factory=time.monotonic)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    """One pull (or the takeover) at a time."""
    watcher: asyncio.Task[None] | None = None
    """Waits for the lease to be lost."""

    @property
    def lease(self) -> Lease:
        return self.fence.lease


class Ownership:
    """The conversations this node owns, and the claimer (see the module docstring).

    ``start`` runs the listener and the claimer in the background; ``close`` stops them
    (the conversations themselves close with the registry, the leases with the keeper's
    ``release_all``)."""

    def __init__(
        self,
        conversations: Conversations,
        inbox: ConversationInbox,
        leases: LeaseKeeper,
        *,
        poll_every: float | None = None,
    ) -> None:
        self._conversations = conversations
        self._inbox = inbox
        self._leases = leases
        ttl = leases.ttl
        self.margin = min(1.0, ttl / 5)
        """Seconds of a lease that must be left for a send to start."""
        self.poll_every = poll_every if poll_every is not None else min(ttl / 3, MAX_POLL)
        self._owned: dict[str, Owned] = {}
        self._claiming: set[str] = set()
        self._tasks = TaskOwner()
        self._poke = asyncio.Event()
        self._closed = False

    # -- what others call -------------------------------------------------------------------

    def owned(self) -> list[str]:
        """The keys of the conversations this node owns now."""
        return sorted(key for key in self._owned if self.owns(key))

    def owns(self, key: str) -> bool:
        owned = self._owned.get(key)
        return owned is not None and not owned.fence.lost

    async def arrived(self, message: InboundMessage) -> None:
        """An accepted message (its inbox entry committed): pulled here if this node owns
        its conversation, else signalled to the nodes (the owner pulls, or one claims)."""
        key = message.conversation_key
        if self.owns(key):
            self._spawn_pull(key)
            return
        try:
            await self._inbox.signal_arrival(key)
        except Exception as exc:  # the claimer finds it by polling
            log.warning("signalling an arrival in %s failed: %s", key, exc)
            self._poke.set()

    def start(self) -> None:
        """Listen for arrivals and claim what nobody owns, in the background."""
        self._tasks.spawn(self._listen(), "ownership:listen")
        self._tasks.spawn(self._claimer(), "ownership:claimer")

    async def close(self) -> None:
        """Stop listening, claiming and pulling (what is owned stays owned until the
        conversations close and the leases are released)."""
        self._closed = True
        await self._tasks.close()

    # -- arrivals and the claimer -----------------------------------------------------------

    async def _listen(self) -> None:
        async for key in self._inbox.listen_arrivals():
            if key is None:
                self._poke.set()  # (re)connected: what came meanwhile is found by polling
            elif self.owns(key):
                self._spawn_pull(key)
            else:
                self._spawn_claim(key)

    async def _claimer(self) -> None:
        failing = False
        while True:
            try:
                await self.poll_once()
            except Exception as exc:
                # Once per outage: the store's health says the rest.
                (log.debug if failing else log.warning)(
                    "looking for conversations to claim failed: %s", exc
                )
                failing = True
            else:
                if failing:
                    log.info("looking for conversations to claim works again")
                failing = False
            self._poke.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.poll_every):
                    await self._poke.wait()

    async def poll_once(self) -> None:
        """One round of the claimer: claim unowned conversations with unfinished entries,
        pull owned ones with entries not taken, release those idle for a TTL."""
        for key in await self._inbox.unowned_conversations():
            if not self.owns(key):
                self._spawn_claim(key)
        heads = await self._inbox.accepted_heads(list(self._owned))
        for key, seq in heads.items():
            owned = self._owned.get(key)
            if owned is not None and seq > owned.taken:
                self._spawn_pull(key)
        now = time.monotonic()
        for key, owned in list(self._owned.items()):
            if key in heads or owned.lock.locked() or not self._conversations.idle(key):
                owned.active_at = now  # idle is counted from when the work was over
            elif now - owned.active_at > self._leases.ttl:
                await self._let_go(owned, "idle")

    def _spawn_pull(self, key: str) -> None:
        if not self._closed:
            self._tasks.spawn(self._pull(key), f"pull:{key}")

    def _spawn_claim(self, key: str) -> None:
        if not self._closed and key not in self._claiming:
            self._claiming.add(key)
            self._tasks.spawn(self._claim(key), f"claim:{key}")

    def _busy(self) -> int:
        return sum(1 for key in self._owned if not self._conversations.idle(key))

    async def _claim(self, key: str) -> None:
        try:
            busy = self._busy()
            if busy:
                await asyncio.sleep(busy * BUSY_DELAY)  # the least busy node tends to win
            if key in self._owned:
                return
            lease = await self._leases.try_claim(lease_name(key))
            if lease is None:
                return
            await self._take_over(key, lease)
        except Exception as exc:
            log.warning("claiming %s failed: %s", key, exc)
        finally:
            self._claiming.discard(key)

    async def _take_over(self, key: str, lease: Lease) -> None:
        """This node has just claimed ``key``: resume it as a restart would, then pull."""
        owned = Owned(key, Fence(lease, self._leases.node_id, self.margin))
        self._owned[key] = owned
        owned.watcher = self._tasks.spawn(self._watch(owned), f"lease:{key}")
        try:
            async with owned.lock:
                with fencing.fenced(owned.fence):
                    entries, pieces = await self._inbox.conversation_backlog(key)
                    await self._conversations.resume_conversation(key, entries, pieces)
                owned.taken = max((entry.seq for entry in entries), default=0)
                owned.active_at = time.monotonic()
        except Exception:
            # Left for the next claim (this node's or another's), from the store.
            await self._let_go(owned, "its takeover failed")
            raise
        log.info("conversation %s taken over (epoch %d)", key, lease.epoch)
        await self._pull(key)

    async def _pull(self, key: str) -> None:
        """Hand the conversation its accepted entries not taken yet, in order."""
        owned = self._owned.get(key)
        if owned is None:
            return
        async with owned.lock:
            if owned.fence.lost or self._owned.get(key) is not owned:
                return
            entries = await self._inbox.accepted_after(key, owned.taken)
            with fencing.fenced(owned.fence):
                for entry in entries:
                    if owned.fence.lost:
                        return
                    owned.taken = entry.seq
                    await self._conversations.submit(entry.message)
            owned.active_at = time.monotonic()

    async def _watch(self, owned: Owned) -> None:
        """Cut the conversation's work once its lease is lost."""
        await owned.lease.lost.wait()
        if self._owned.get(owned.key) is owned:
            log.warning(
                "conversation %s: lease lost (epoch %d); its work stops, another node resumes it",
                owned.key,
                owned.lease.epoch,
            )
            await self._let_go(owned, "lost")

    async def _let_go(self, owned: Owned, why: str) -> None:
        if self._owned.get(owned.key) is owned:
            del self._owned[owned.key]
        self._conversations.forget(owned.key)
        if owned.watcher is not None and owned.watcher is not asyncio.current_task():
            owned.watcher.cancel()
        log.debug("conversation %s let go (%s)", owned.key, why)
        try:
            await self._leases.release(owned.lease)
        except Exception as exc:  # the database is away: the lease runs out by itself
            log.warning("lease of %s not released (%s); it expires by itself", owned.key, exc)


__all__ = ["Owned", "Ownership", "lease_name"]
