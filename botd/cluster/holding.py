"""Work that only one node may do at a time, run while this node holds its lease.

A platform allows one connection per bot account for some of its work: one Telegram
``getUpdates`` poller per token, one Discord gateway session per shard. On several nodes that
work is held under a lease (``<channel>:<account>``, ``<channel>:<account>:<shard>``):
``hold_lease`` claims it, runs the work while it holds it, and when the lease is lost (its
renewal failed: the database away, the process paused past the TTL) cancels the work at once
and goes back to standby. A node on standby tries the claim again every third of the TTL, so
the work moves to another node within about the TTL of its holder's death.

Work whose platform cannot be reached from this node (its polls unanswered, its gateway
gone) past a bound of its own ends by raising ``PlatformUnreachable``: the lease is given up
at once (expired, so another node may claim it now), and this node waits a whole TTL before
it claims again, so a node on standby that can reach the platform (it tries every third of
the TTL) takes the work over first. If none can, the work comes back to a node later.

The inputs are spread over the nodes up (their own leases standing), each node's share
being its inputs over the nodes, rounded up; this assumes the nodes run one config. A node
that holds its share leaves a free input to the others for up to a TTL before it claims it
itself, so nodes started together split the inputs, and an input whose node died goes to a
node with fewer. A node that has held more than its share for a whole TTL (a node
joined after it took everything) hands one input over at a time: of the kind of work it
holds most of, the last by name, so that each node keeps some of each kind.
Handing over costs a gap of about a third of a TTL (a Discord shard identifies again), so
an input handed over and then claimed back because no other node took it (its config lacks
the channel, it cannot reach the platform) is kept for ``KEEP_AFTER_UNTAKEN`` TTLs before
it is offered again, and a node that gave an input up as unreachable leaves it to the
others first for ``AVOID_AFTER_UNREACHABLE`` TTLs.

Each change of state is logged once, in one line naming the lease and the role:
``telegram:main poller: standby (held by node-b)``, ``... holding (epoch 4)``; the retries
in between say nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping

from .leases import Lease, LeaseKeeper

__all__ = ["PlatformUnreachable", "first_to_hand_over", "hold_lease"]

log = logging.getLogger(__name__)

Work = Callable[[Lease], Awaitable[None]]
"""The work done while holding: runs until cancelled (the lease lost or the holding ended)."""


class PlatformUnreachable(Exception):
    """Raised by held work whose platform this node has not reached for longer than the
    work's bound: the lease is given up so that another node takes the work over."""


class _Said:
    """The last state line logged, so each change is said once."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.last = ""

    def say(self, state: str, *, level: int = logging.INFO) -> None:
        if state != self.last:
            self.last = state
            log.log(level, "%s: %s", self.label, state)


async def _holder(leases: LeaseKeeper, name: str) -> str:
    """Who holds ``name`` now, by its row in the lease table (``?`` when it cannot tell): a
    node on standby asks this at each retry, so it reads that row alone, never the table
    (which has a row per conversation ever answered)."""
    try:
        holder = await leases.table.holder(name)
    except Exception:
        return "?"
    return holder or "?"


async def hold_lease(leases: LeaseKeeper, name: str, role: str, work: Work) -> None:
    """Run ``work`` whenever this node holds the lease ``name``, until cancelled.

    ``role`` names the work in the log lines (``poller``, ``gateway``). On cancellation the
    work is cancelled and the lease released, so another node may claim it at once. Work that
    ends by itself (it failed) gives the lease up too and is tried again at the next claim.
    The inputs are spread over the nodes up (see the module docstring).
    """
    said = _Said(f"{name} {role}")
    retry = leases.renew_every
    leases.inputs[name] = role
    loop = asyncio.get_running_loop()
    left_since: float | None = None
    handed_over = False
    keep_until = avoid_until = 0.0
    try:
        while True:
            avoiding = loop.time() < avoid_until
            if await _leave_to_others(leases, name, avoiding=avoiding):
                left_since = loop.time() if left_since is None else left_since
                if loop.time() - left_since < leases.ttl:
                    said.say(
                        "standby (left to the other nodes: "
                        + (
                            "its platform was unreachable from here)"
                            if avoiding
                            else "this node holds its share of the inputs)"
                        )
                    )
                    await asyncio.sleep(retry)
                    continue
            try:
                lease = await leases.try_claim(name)
            except Exception as exc:  # the database is away: nobody can claim meanwhile
                said.say(
                    f"standby (cannot claim: {' '.join(str(exc).split())})", level=logging.WARNING
                )
                await asyncio.sleep(retry)
                continue
            if lease is None:
                left_since = None  # another node took it: a new wait when it is free again
                if leases.holding(name) is None:
                    said.say(f"standby (held by {await _holder(leases, name)})")
                    handed_over = False
                await asyncio.sleep(retry)
                continue
            left_since = None
            if handed_over:  # nobody took it: keep it a while rather than offer it again
                keep_until, handed_over = loop.time() + KEEP_AFTER_UNTAKEN * leases.ttl, False
            said.say(f"holding (epoch {lease.epoch})")
            ended = await _while_held(leases, lease, work, said, hand_over=keep_until)
            handed_over = ended == "handed over"
            if ended == "unreachable":
                avoid_until = loop.time() + AVOID_AFTER_UNREACHABLE * leases.ttl
            # Given up for an unreachable platform: a whole TTL, so another node claims first.
            await asyncio.sleep(leases.ttl if ended == "unreachable" else retry)
    finally:
        leases.inputs.pop(name, None)
        held = leases.holding(name)
        if held is not None:
            try:
                await leases.release(held)
            except Exception as exc:  # it expires by itself
                log.warning("%s: not released (%s); it expires by itself", said.label, exc)


KEEP_AFTER_UNTAKEN = 10
"""TTLs an input handed over and then claimed back (no other node took it: its config lacks
the channel, it cannot reach the platform) is kept before it may be offered again."""


async def _share(leases: LeaseKeeper) -> tuple[int, int]:
    """How many inputs this node holds, and its share of them: its inputs over the nodes up,
    rounded up (1 node up: all of them)."""
    nodes = await leases.nodes_up()
    return len(leases.inputs_held()), -(-len(leases.inputs) // nodes)


AVOID_AFTER_UNREACHABLE = 40
"""TTLs after this node gave an input up because it could not reach its platform during
which it leaves that input to the other nodes first (as if it held its share), so that an
input offered to spread the inputs does not come back to a node that cannot run it."""


async def _leave_to_others(leases: LeaseKeeper, name: str, *, avoiding: bool) -> bool:
    """Whether this node should leave the free lease ``name`` for another node a while: it
    holds its share of the inputs already (or is ``avoiding`` ``name``), and ``name`` is
    free for whoever claims it."""
    if not leases.lapses or leases.holding(name) is not None:
        return False
    held, share = await _share(leases)
    if held < share and not avoiding:
        return False
    try:
        return await leases.table.holder(name) is None
    except Exception:
        return False


def first_to_hand_over(held: Mapping[str, str]) -> str | None:
    """Which of ``held`` (lease name -> role) a node over its share hands over first: of the
    role it holds most of (so a node keeps some of each kind: one Telegram poller of two, one
    Discord shard of two), the last by name; None when it holds none."""
    by_role: dict[str, list[str]] = {}
    for name, role in sorted(held.items()):
        by_role.setdefault(role, []).append(name)
    if not by_role:
        return None
    names = max(by_role.values(), key=lambda names: (len(names), names[-1]))
    return names[-1]


async def _over_share(leases: LeaseKeeper, lease: Lease, not_before: float) -> None:
    """Return when this node should hand ``lease`` over: it has held more than its share of
    the inputs for a whole TTL (checked every third of one), and ``lease`` is the one it hands
    over first (``first_to_hand_over``), so one is handed over at a time; not before
    ``not_before`` (the loop's time)."""
    loop = asyncio.get_running_loop()
    since: float | None = None
    while True:
        await asyncio.sleep(leases.renew_every)
        held, share = await _share(leases)
        over = held > share and first_to_hand_over(leases.inputs_held()) == lease.name
        if not over or loop.time() < not_before:
            since = None
        elif since is None:
            since = loop.time()
        elif loop.time() - since >= leases.ttl:
            return


async def _while_held(
    leases: LeaseKeeper, lease: Lease, work: Work, said: _Said, *, hand_over: float
) -> str:
    """``work(lease)`` until the lease is lost (then cancelled), the work ends, or the lease
    is handed over to spread the inputs (not before the loop's time ``hand_over``); how it
    ended: ``lost``, ``unreachable`` (given up: the platform cannot be reached), ``ended`` or
    ``handed over``."""
    running = asyncio.ensure_future(work(lease))
    lost = asyncio.ensure_future(lease.lost.wait())
    # A node alone (leases that never lapse) has nobody to hand over to.
    spread = asyncio.ensure_future(
        _over_share(leases, lease, hand_over) if leases.lapses else asyncio.Future()
    )
    try:
        await asyncio.wait({running, lost, spread}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiting in (lost, spread, running):
            if not waiting.done():
                waiting.cancel()
        await asyncio.wait({running, lost, spread})
    if lease.lost.is_set():
        said.say(f"lost (epoch {lease.epoch}), stopped; standby", level=logging.WARNING)
        return "lost"
    if running.cancelled() and not spread.cancelled() and spread.exception() is None:
        said.say(f"handed over to spread the inputs over {await leases.nodes_up()} nodes; standby")
        await leases.release(lease)
        return "handed over"
    failure = None if running.cancelled() else running.exception()
    if isinstance(failure, PlatformUnreachable):
        said.say(f"giving the lease up: {failure}; standby", level=logging.WARNING)
    else:
        said.say(f"ended ({failure or 'by itself'}); giving the lease up", level=logging.WARNING)
    await leases.release(lease)
    return "unreachable" if isinstance(failure, PlatformUnreachable) else "ended"
