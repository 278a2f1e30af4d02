"""Who is up and who holds what, as the lease table says: the nodes and the inputs.

Read from the leases that stand (``LeaseTable.standing``): every node's own lease
(``node:<id>``, held while the node runs), the schedule's and each channel input's (held or
not), and the conversations held now. From them:

* ``nodes``: one per node that ever ran on the database: ``up`` while its own lease holds
  (with what else it holds: named leases, and a count of conversations), ``gone`` with the
  seconds since its lease ran out (a node stopped cleanly gives it up at once; a dead one
  stops renewing it). A node retired for good stays ``gone``: its row is never deleted.
* ``inputs``: for each channel whose input one node takes at a time (a Telegram poller, a
  Discord shard: ``LeasedInput``), each of its leases as this node sees it: ``holding`` (this
  node), ``standby`` (another node holds it: ``holder``) or ``unheld`` (no node holds it:
  ``seconds`` since it ran out, None when it was never held).

``/healthz`` shows both in its ``node`` object (``botd.ops.node``) and ``botd status`` shows
``nodes`` read from the database itself too, from one function, so they say the same.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .leases import CONVERSATION_LEASE, NODE_LEASE, LeaseRow

__all__ = ["channel_inputs", "nodes"]


def nodes(rows: Iterable[LeaseRow]) -> list[dict[str, Any]]:
    """Each node (sorted by id) as ``{"id", "state": "up" | "gone", "seconds", "holds",
    "conversations"}``: ``seconds`` is how long a gone node has been gone (None when up),
    ``holds`` the other leases an up node holds (by name), ``conversations`` how many
    conversations it holds."""
    rows = list(rows)
    found: list[dict[str, Any]] = []
    for row in rows:
        if not row.name.startswith(NODE_LEASE):
            continue
        node = row.name.removeprefix(NODE_LEASE)
        if row.expires_in > 0:
            held = [r.name for r in rows if r.holder == node and r.expires_in > 0]
            conversations = sum(name.startswith(CONVERSATION_LEASE) for name in held)
            named = (CONVERSATION_LEASE, NODE_LEASE)
            holds = sorted(name for name in held if not name.startswith(named))
            found.append(
                {
                    "id": node,
                    "state": "up",
                    "seconds": None,
                    "holds": holds,
                    "conversations": conversations,
                }
            )
        else:
            gone = max(0.0, -row.expires_in)
            found.append(
                {"id": node, "state": "gone", "seconds": gone, "holds": [], "conversations": 0}
            )
    return sorted(found, key=lambda node: str(node["id"]))


def channel_inputs(
    rows: Iterable[LeaseRow], leases: Mapping[str, Sequence[str]], me: str
) -> dict[str, list[dict[str, Any]]]:
    """For each channel of ``leases`` (channel -> the names of its input's leases), each
    lease as ``{"lease", "state": "holding" | "standby" | "unheld", "holder", "seconds"}``
    seen by the node ``me``: ``holder`` names who holds it (None when unheld), ``seconds``
    how long it has been unheld (None when held, or never held)."""
    by_name = {row.name: row for row in rows}
    found: dict[str, list[dict[str, Any]]] = {}
    for channel, names in sorted(leases.items()):
        states: list[dict[str, Any]] = []
        for name in names:
            row = by_name.get(name)
            if row is not None and row.expires_in > 0:
                state = "holding" if row.holder == me else "standby"
                states.append(
                    {"lease": name, "state": state, "holder": row.holder, "seconds": None}
                )
            else:
                gone = None if row is None else max(0.0, -row.expires_in)
                states.append({"lease": name, "state": "unheld", "holder": None, "seconds": gone})
        if states:
            found[channel] = states
    return found
