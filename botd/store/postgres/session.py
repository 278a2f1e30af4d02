"""How long a PostgreSQL session of botd's may keep another node waiting, and how long botd
waits for a server that went silent: every bound derived from ``store.lease_ttl``.

A node frozen (SIGSTOP, a VM paused, a long stall) or cut off by the network inside a
transaction keeps that transaction's locks on the server (a conversation's advisory lock, the
``FOR KEY SHARE`` on its lease rows) until the server ends it. Left to TCP, that is hours; every
other node that touches those conversations would wait as long. So each session botd opens
tells the server (``options``, set at connect) to end it sooner:

* ``idle_in_transaction_session_timeout`` = TTL: a transaction whose client sent nothing
  for that long is ended, its locks released. This is what ends a *frozen* client's
  transaction: its kernel still answers TCP, so keepalives see nothing wrong. A frozen
  holder's locks are thus gone by the time its leases expire, when another node may take its
  conversations anyway. Not shorter: botd's transactions send their statements back to back,
  but between two of them its event loop may be late (a busy machine, a channel starting), and
  a live node must never be cut for that; one whose loop stalled for a whole TTL has missed
  its renewals (due every TTL / 3) and lost its leases already.
* ``lock_timeout`` = TTL / 10: a statement that waits for a lock (a row another transaction
  holds, a claim of a lease row under another node's ``FOR KEY SHARE``) gives up after that, so
  no statement of a live node stalls behind a frozen one; the caller tries again later.
* ``statement_timeout`` = TTL: no statement of botd's runs for as long as a lease.
* ``plan_cache_mode`` = ``force_generic_plan`` (not a bound, set here with them): see
  ``server_options``.
* TCP keepalives and ``tcp_user_timeout`` on the server's side of the socket (idle TTL / 3,
  then every TTL / 6, three probes; unacknowledged data for a TTL) and the same on libpq's
  side: a peer cut off by the network (no acknowledgements at all) is noticed within about a
  TTL by whichever end is waiting.

The last gap is a client that waits on a server whose packets are acknowledged but never
answered (a proxy or middlebox that stopped forwarding, a server frozen itself): TCP sees
nothing there. ``answer_within`` bounds such a wait on botd's side: past its time the
connection's socket is shut down, so the pending call fails at once as a lost connection
(psycopg's own cancellation would first open a second connection to ask the server to cancel,
which the same silence holds up). It cuts only a connection with nothing to read: an answer
that came while this process was busy (its event loop late) is not a silent server.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import select
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

DEFAULT_LEASE_TTL = 15.0
"""``store.lease_ttl``'s default, for a store opened without one (tests, tools)."""


@dataclass(frozen=True)
class SessionBounds:
    """The bounds of every session botd opens on the database, from ``lease_ttl`` (see the
    module docstring for why each is what it is)."""

    lease_ttl: float

    @property
    def idle_in_transaction(self) -> float:
        return self.lease_ttl

    @property
    def lock_wait(self) -> float:
        return self.lease_ttl / 10

    @property
    def statement(self) -> float:
        return self.lease_ttl

    @property
    def keepalive_idle(self) -> int:
        """Whole seconds (libpq's and the server's unit)."""
        return max(1, math.ceil(self.lease_ttl / 3))

    @property
    def keepalive_interval(self) -> int:
        return max(1, math.ceil(self.lease_ttl / 6))

    keepalive_count = 3

    @property
    def unacknowledged(self) -> int:
        """``tcp_user_timeout`` in milliseconds."""
        return max(1000, math.ceil(self.lease_ttl * 1000))

    def server_options(self) -> str:
        """The ``-c`` settings the server applies to the session (libpq's ``options``)."""
        settings = {
            "idle_in_transaction_session_timeout": _ms(self.idle_in_transaction),
            "lock_timeout": _ms(self.lock_wait),
            "statement_timeout": _ms(self.statement),
            "tcp_keepalives_idle": self.keepalive_idle,
            "tcp_keepalives_interval": self.keepalive_interval,
            "tcp_keepalives_count": self.keepalive_count,
            "tcp_user_timeout": self.unacknowledged,
            # Prepared statements run on the plan the server keeps for them: botd's find
            # their rows by a key, which the plan for any parameters does as well; left to
            # choose (``auto``), the server plans a statement taking an array (``id =
            # ANY(...)``) again at every ``EXECUTE``, which costs more than running it.
            "plan_cache_mode": "force_generic_plan",
        }
        return " ".join(f"-c {name}={value}" for name, value in settings.items())

    def connect_kwargs(self, dsn: str, *, migrating: bool = False) -> dict[str, Any]:
        """libpq's keyword arguments for a session on ``dsn``: the keepalives, and the
        server's settings added to any ``options`` the DSN has. ``migrating``: the schema's
        migration, which may wait for another node's (it runs under an advisory lock) and
        may take long on a big database: only the idle bound and the keepalives."""
        options = self.server_options()
        if migrating:
            options = (
                f"-c idle_in_transaction_session_timeout={_ms(self.idle_in_transaction)} "
                "-c lock_timeout=0 -c statement_timeout=0"
            )
        try:
            own = conninfo_to_dict(dsn).get("options")
        except psycopg.Error:
            own = None
        return {
            "keepalives": 1,
            "keepalives_idle": self.keepalive_idle,
            "keepalives_interval": self.keepalive_interval,
            "keepalives_count": self.keepalive_count,
            "tcp_user_timeout": self.unacknowledged,
            "options": f"{own} {options}" if own else options,
        }


def _ms(seconds: float) -> int:
    return max(1, math.ceil(seconds * 1000))


class Unanswered(psycopg.OperationalError):
    """The server did not answer within the time ``answer_within`` gave it: the connection
    was cut on botd's side (a fault, as a lost connection is)."""


@contextlib.asynccontextmanager
async def answer_within(conn: psycopg.AsyncConnection[Any], seconds: float) -> AsyncIterator[None]:
    """Run the block on ``conn``; if it is still waiting after ``seconds``, shut the
    connection's socket down so that the wait fails now (``Unanswered``), and the pool
    discards the connection."""
    loop = asyncio.get_running_loop()
    cut = False
    timer: asyncio.TimerHandle | None = None

    def shut() -> None:
        nonlocal cut, timer
        if answered(conn):
            # The answer is there, not read yet: this process was slow (a busy or stalled
            # event loop), not the server. Look again after as long.
            timer = loop.call_later(seconds, shut)
            return
        cut = True
        shut_down(conn)

    timer = loop.call_later(seconds, shut)
    try:
        yield
    except psycopg.Error as exc:
        if cut:
            raise Unanswered(f"no answer from the server within {seconds:g} s") from exc
        raise
    finally:
        assert timer is not None
        timer.cancel()


def answered(conn: psycopg.AsyncConnection[Any]) -> bool:
    """Whether ``conn``'s socket has something to read now (or is gone)."""
    try:
        fd = conn.pgconn.socket
    except psycopg.OperationalError:
        return True  # closed: whatever waits on it fails by itself
    try:
        readable, _, _ = select.select([fd], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


def shut_down(conn: psycopg.AsyncConnection[Any]) -> None:
    """Shut ``conn``'s socket down in both directions (the descriptor stays libpq's to
    close): whatever waits on it sees the connection end."""
    try:
        fd = conn.pgconn.socket
    except psycopg.OperationalError:
        return  # already closed
    with contextlib.suppress(OSError):
        duplicate = socket.socket(fileno=os.dup(fd))
        try:
            duplicate.shutdown(socket.SHUT_RDWR)
        finally:
            duplicate.close()


__all__ = [
    "DEFAULT_LEASE_TTL",
    "SessionBounds",
    "Unanswered",
    "answer_within",
    "answered",
    "shut_down",
]
