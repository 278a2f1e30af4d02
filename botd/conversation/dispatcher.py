"""The dispatcher: the one door from the inbox into the conversations this node holds, on
every node and both backends.

Every producer accepts into the inbox first (the router: a message, a press, a chat command;
the scheduler: a job's fire), then tells this node's dispatcher (``arrived``). A conversation
is run by the node holding its lease ``conversation:<key>`` (``botd.cluster.leases``) and
reaches it only through the inbox: ``arrived`` pulls the entry when this node holds the
conversation, else signals the arrival (``ConversationInbox.signal_arrival``: a ``NOTIFY`` on
PostgreSQL, within the process on SQLite) so that its holder pulls it, or a node claims it.
On several nodes a node that hears of an arrival for a conversation nobody holds waits 50 ms
for each conversation it is busy with before it claims, so the least busy node tends to win
(the node that accepted is not favoured: with Telegram polling every message arrives on the
poller's node, and the runs must spread).

* **pull**: the conversation's ``accepted`` entries past the last one this node took, in
  ``seq`` (commit) order, handed to ``Conversations.submit`` one by one, one pull at a time
  per conversation. An arrival this node accepted itself, which the store knows comes right
  after the last one taken (``next_place``: PostgreSQL numbers a conversation's entries
  without gaps), is handed over as it is, with no read. Chat commands are entries too, so
  ``/stop`` accepted anywhere reaches the holder, in its place among the messages.
* **takeover**: a claim is a restart of that one conversation
  (``Conversations.resume_conversation``): an interrupted run goes on from its last finished
  step, the old run's pieces are superseded or sent again keyed, unconfirmed pieces of
  finished runs are sent, then it pulls. The takeover reads the whole backlog, in order,
  before any pull: what an earlier holder left goes before what arrives now.
* **restart**: nothing is resumed but by a claim. The first poll, as the dispatcher starts
  (once the channels can send), claims every conversation with unfinished entries that no
  live lease holds (on one node: every one), and takes each over as above.
* **fencing**: on several nodes everything the conversation does runs under its lease:
  the conversation is given its ``RunScope`` (its key and its lease's ``Fence``) with its
  takeover and each entry it is handed, and passes it on explicitly (its store view, its
  sends, its tools): its writes are made only while the lease holds and no send starts
  within ``margin`` of the lease's end. A lease lost (not renewed in time, or given up by a
  send) cuts the conversation's work, marking nothing, and drops it from memory; whoever
  claims it next (this node too, with a new epoch) resumes it from the store.
* **idle**: on several nodes a conversation with nothing running or waiting for a TTL
  releases its lease and leaves memory, so a dead node's idle conversations do not hold up
  new messages. Accepted entries at or below the last taken do not keep it: they are none
  this node will hand over (a person forgotten, ``botd.forget``, takes every inbox row of
  their conversation, and its ``seq`` starts again from 1), and whoever claims it next
  takes them up.
* **polling**: arrivals are only a hint (a node away from the database misses them). Every
  ``min(ttl / 3, 2 s)`` the poller claims conversations with unfinished entries and no live
  lease (an accept whose commit reply was cut is among them: it is ``accepted``), and pulls
  held conversations with accepted entries not taken yet (after a pull that failed, say).

One node (SQLite) runs the same algorithm over the in-process lease table, whose leases never
lapse (``LeaseKeeper.alone``): no other node can hold a conversation, so a claim waits for
nobody, no idle conversation is let go (another node taking it is the only reason to; here it
would only cost a transcript reload), the work is not fenced (its ``RunScope`` has no fence:
nothing to fence against, and a failed write is handled as with no lease), and the pieces an
earlier process left unconfirmed of runs that answered no entry (in no conversation's backlog)
are sent at start (on several nodes such a piece may still be on its way from a live node: it
is left). Once started, it hands an arrival over (the pull, or the claim and takeover) before
``arrived`` returns: the producer goes on (a channel reads its next message) once the entry is
in its conversation, so what arrives next finds the conversation as it always did (a turn
begun, say, that a ``collect`` queue then does not join). When the arrival is the only entry
past the last taken, the pull reads the entries' places only and hands over the message in
hand, not read back. Several nodes hand over in the background: the holder may be another node,
and a claim waits for the least busy.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..chat import InboundMessage
from ..cluster.fencing import Fence, RunScope
from ..cluster.leases import CONVERSATION_LEASE, Lease, LeaseKeeper, LeaseLost
from ..store import StoreError
from ..store.protocols import ConversationInbox
from .promise import ResumePlan
from .registry import Conversations
from .tasks import TaskOwner

log = logging.getLogger(__name__)

BUSY_DELAY = 0.05
"""Seconds a node waits before claiming, per conversation it is busy with (several nodes)."""
MAX_POLL = 2.0


def lease_name(conversation_key: str) -> str:
    return CONVERSATION_LEASE + conversation_key


@dataclass(eq=False, slots=True)
class Held:
    """A conversation this node holds the lease of."""

    key: str
    fence: Fence
    scope: RunScope
    """What the conversation's work runs under here (a node alone: no fence)."""
    taken: int = 0
    """The ``seq`` of the last entry handed to the conversation."""
    active_at: float = field(default_factory=time.monotonic)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    """One pull (or the takeover) at a time."""
    watcher: asyncio.Task[None] | None = None
    """Waits for the lease to be lost (leases that lapse only)."""

    @property
    def lease(self) -> Lease:
        return self.fence.lease


class Dispatcher:
    """The conversations this node holds, and how accepted entries reach them (see the
    module docstring).

    ``start`` runs the listener and the poller in the background; ``close`` stops them and
    every claim and pull (the conversations themselves close with the registry, the leases
    with the keeper's ``release_all``)."""

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
        self._held: dict[str, Held] = {}
        self._claiming: set[str] = set()
        self._background = TaskOwner()
        """The listener, the poller and the leases' watchers."""
        self._handing = TaskOwner()
        """Claims and pulls under way."""
        self._poke = asyncio.Event()
        self._started = False
        self._closed = False

    # -- what others call -------------------------------------------------------------------

    def held(self) -> list[str]:
        """The keys of the conversations this node holds now."""
        return sorted(key for key in self._held if self.holds(key))

    def holds(self, key: str) -> bool:
        held = self._held.get(key)
        return held is not None and not held.fence.lost

    async def arrived(self, message: InboundMessage) -> None:
        """An accepted message (its inbox entry committed): pulled here if this node holds
        its conversation, else signalled (its holder pulls it, or a node claims it); a node
        alone, once started, pulls or claims it before returning (see the module docstring)."""
        key = message.conversation_key
        if self._started and not self._closed and not self._leases.lapses:
            if self.holds(key):
                await self._pull(key, message)
            elif key not in self._claiming:
                self._claiming.add(key)
                await self._claim(key, message.inbox_id)
            return
        if self.holds(key):
            self._spawn_pull(key, message)
            return
        try:
            await self._inbox.signal_arrival(key)
        except Exception as exc:  # the poller finds it
            log.warning("signalling an arrival in %s failed: %s", key, exc)
            self._poke.set()

    async def start(self) -> None:
        """Listen for arrivals, and claim and pull in the background (the first poll at
        once: a restart). A node alone first sends the pieces of no conversation an earlier
        process left (see the module docstring)."""
        if not self._leases.lapses:
            await self._send_unanchored()
        self._started = True
        self._background.spawn(self._listen(), "dispatcher:listen")
        self._background.spawn(self._poller(), "dispatcher:poll")

    async def drain(self) -> None:
        """Wait until what was accepted by now is handed over and every conversation here is
        idle (the console's end of input): a poll first finds what no arrival brought yet."""
        try:
            await self.poll_once()
        except Exception as exc:
            log.warning("looking for messages not handed over yet failed: %s", exc)
        while True:
            await self._handing.settle()
            await self._conversations.drain()
            if not self._handing.running():
                return

    async def close(self) -> None:
        """Stop listening, claiming and pulling (what is held stays held until the
        conversations close and the leases are released)."""
        self._closed = True
        await self._background.close()
        await self._handing.close()

    # -- arrivals and the poller ------------------------------------------------------------

    async def _listen(self) -> None:
        async for key in self._inbox.listen_arrivals():
            if key is None:
                self._poke.set()  # (re)connected: what came meanwhile is found by polling
            elif self.holds(key):
                self._spawn_pull(key)
            else:
                self._spawn_claim(key)

    async def _poller(self) -> None:
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
        """One round of the poller: claim conversations with unfinished entries that nobody
        holds, pull held ones with entries not taken, and (several nodes) let go of those
        idle for a TTL."""
        for key in await self._inbox.unowned_conversations():
            if not self.holds(key):
                self._spawn_claim(key)
        heads = await self._inbox.accepted_heads(list(self._held))
        for key, seq in heads.items():
            held = self._held.get(key)
            if held is not None and seq > held.taken:
                self._spawn_pull(key)
        if self._leases.lapses:
            await self._let_go_idle(heads)

    async def _let_go_idle(self, heads: Mapping[str, int]) -> None:
        now = time.monotonic()
        for key, held in list(self._held.items()):
            waiting = heads.get(key, 0) > held.taken
            if waiting or held.lock.locked() or not self._conversations.idle(key):
                held.active_at = now  # idle is counted from when the work was over
            elif now - held.active_at > self._leases.ttl:
                await self._let_go(held, "idle")

    async def _send_unanchored(self) -> None:
        """A node alone, at start: the unconfirmed pieces of runs that answered no entry are
        an earlier process's (see the module docstring): sent now, keyed."""
        try:
            pieces = await self._inbox.unanchored_pieces()
        except Exception as exc:
            log.warning("reading the unconfirmed pieces of no conversation failed: %s", exc)
            return
        self._conversations.send_unconfirmed(pieces)

    def _spawn_pull(self, key: str, arrived: InboundMessage | None = None) -> None:
        if not self._closed:
            self._handing.spawn(self._pull(key, arrived), f"pull:{key}")

    def _spawn_claim(self, key: str) -> None:
        if not self._closed and key not in self._claiming:
            self._claiming.add(key)
            self._handing.spawn(self._claim(key), f"claim:{key}")

    def _busy(self) -> int:
        return sum(1 for key in self._held if not self._conversations.idle(key))

    # -- claims, takeovers and pulls --------------------------------------------------------

    async def _claim(self, key: str, arrived: int | None = None) -> None:
        """Claim ``key`` and take it over (``arrived``: the entry whose arrival this node
        claims it for, if known)."""
        try:
            busy = self._busy() if self._leases.lapses else 0
            if busy:
                await asyncio.sleep(busy * BUSY_DELAY)  # the least busy node tends to win
            if key in self._held:
                return
            lease = await self._leases.try_claim(lease_name(key))
            if lease is None:
                return
            await self._take_over(key, lease, arrived)
        except LeaseLost as exc:
            # Lost again while it was taken over (a WARNING by ``_watch`` once it watched).
            log.info("taking %s over stopped: %s", key, exc)
        except StoreError as exc:
            # The database away: told once by the store (its health), tried again later.
            log.info("claiming %s failed: %s", key, exc)
        except Exception as exc:
            log.warning("claiming %s failed: %s", key, exc)
        finally:
            self._claiming.discard(key)

    async def _take_over(self, key: str, lease: Lease, arrived: int | None) -> None:
        """This node has just claimed ``key``: resume it as a restart would, then pull."""
        fence = Fence(lease, self._leases.node_id, self.margin)
        # A lease that never lapses fences nothing (see the module docstring).
        held = Held(key, fence, RunScope(key, fence if self._leases.lapses else None))
        self._held[key] = held
        if self._leases.lapses:  # one that never lapses is never lost
            held.watcher = self._background.spawn(self._watch(held), f"lease:{key}")
        try:
            async with held.lock:
                entries, pieces = await self._inbox.conversation_backlog(key)
                plan = await self._conversations.resume_conversation(
                    key, entries, pieces, held.scope
                )
                held.taken = max((entry.seq for entry in entries), default=0)
                held.active_at = time.monotonic()
        except BaseException:
            # Left for the next claim (this node's or another's), from the store; cut by
            # the shutdown too: what it handed over is not known as taken.
            await self._let_go(held, "its takeover failed")
            raise
        self._say_taken_over(key, lease, plan, arrived)
        await self._pull(key)

    def _say_taken_over(
        self, key: str, lease: Lease, plan: ResumePlan, arrived: int | None
    ) -> None:
        """What the takeover found left, if anything, and (several nodes) the takeover
        itself: a node alone takes a conversation over at its first message here, which is
        nothing to say."""
        left = [entry for entry in plan.entries if entry.id != arrived]
        if left or plan.unsent:
            log.info(
                "took %s over: %d message(s) (%d interrupted), %d unconfirmed reply piece(s)",
                key,
                len(left),
                len(plan.resumed_turns),
                len(plan.unsent),
            )
        (log.info if self._leases.lapses else log.debug)(
            "conversation %s taken over (epoch %d)", key, lease.epoch
        )

    async def _pull(self, key: str, arrived: InboundMessage | None = None) -> None:
        """Hand the conversation its accepted entries not taken yet, in order (``arrived``:
        the entry whose arrival this pull is for, if known)."""
        held = self._held.get(key)
        if held is None:
            return
        async with held.lock:
            if held.fence.lost or self._held.get(key) is not held:
                return
            try:
                waiting = await self._waiting(held, arrived)
            except Exception as exc:
                log.warning("pulling the messages of %s failed: %s; polling tries again", key, exc)
                return
            for seq, message in waiting:
                if held.fence.lost:
                    return
                held.taken = seq
                try:
                    await self._conversations.submit(message, held.scope)
                except Exception:
                    # Left accepted: the next takeover (a restart, on one node) has it.
                    log.exception("handing inbox entry %s to %s failed", message.inbox_id, key)
            held.active_at = time.monotonic()

    async def _waiting(
        self, held: Held, arrived: InboundMessage | None
    ) -> list[tuple[int, InboundMessage]]:
        """The conversation's accepted entries past the last taken, in order, as ``(seq,
        message)``. When they are the arrival alone, its message is the one in hand: the
        read names the entries without reading their messages back (the common case of a
        node alone, which pulls as each message arrives), and nothing is read when the store
        knows the arrival comes right after the last taken (``next_place``: this node
        accepted it, on PostgreSQL)."""
        if arrived is not None:
            if arrived.inbox_id is not None:
                seq = self._inbox.next_place(arrived.inbox_id, held.taken)
                if seq is not None:
                    return [(seq, arrived)]
            places = await self._inbox.accepted_places_after(held.key, held.taken)
            if [inbox_id for inbox_id, _ in places] == [arrived.inbox_id]:
                return [(places[0][1], arrived)]
        entries = await self._inbox.accepted_after(held.key, held.taken)
        return [(entry.seq, entry.message) for entry in entries]

    async def _watch(self, held: Held) -> None:
        """Cut the conversation's work once its lease is lost."""
        await held.lease.lost.wait()
        if self._held.get(held.key) is held:
            log.warning(
                "conversation %s: lease lost (epoch %d: %s); its work stops, another node "
                "resumes it",
                held.key,
                held.lease.epoch,
                held.lease.why or "lost",
            )
            await self._let_go(held, "lost")

    async def _let_go(self, held: Held, why: str) -> None:
        if self._held.get(held.key) is held:
            del self._held[held.key]
        self._conversations.forget(held.key)
        if held.watcher is not None and held.watcher is not asyncio.current_task():
            held.watcher.cancel()
        log.debug("conversation %s let go (%s)", held.key, why)
        try:
            await self._leases.release(held.lease)
        except Exception as exc:  # the database is away: the lease runs out by itself
            log.warning("lease of %s not released (%s); it expires by itself", held.key, exc)


__all__ = ["Dispatcher", "Held", "lease_name"]
