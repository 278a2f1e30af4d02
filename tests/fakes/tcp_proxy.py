"""A TCP proxy on loopback that can go silent: the network between one botd node and
PostgreSQL (or a platform), cut without closing anything.

    async with SilentProxy(host, port) as proxy:
        dsn = proxy.dsn(postgres_dsn)      # the same database, through the proxy
        proxy.cut()                        # forward nothing; every socket stays open
        proxy.cut_after(b"FOR SHARE")      # ... once a chunk carrying these bytes went by
        proxy.hold(b"BEGIN", at_most=1.0)  # the next client turn carrying them waits ...
        proxy.let_go()                     # ... until now (or at_most seconds)
        proxy.refuse()                     # close every socket, and each new one at once
        proxy.mend()                       # forward again what waited, and what comes

Cut, the proxy reads nothing more from either side, so what the peers send waits in the
kernel's buffers, acknowledged by TCP, as a network that drops everything past the proxy
would leave it (the keepalives of each peer are answered by the proxy's kernel: only the
peers' own timeouts notice). A connection opened meanwhile is taken but not carried on until
the proxy mends. ``cut_after`` cuts right after forwarding a chunk from the client once
what the client sent since the server last answered on that connection (its turn: one query
libpq may write in several pieces, or a pipeline) contains the given bytes (or a given test
accepts it): the server got the statement (and takes its locks), its answer never comes
back. The turn, not the chunk, is matched, so a statement split over two reads is still
seen whole. ``hold`` keeps one client turn back: the next one that contains the given bytes
(or that a given test accepts) is not forwarded, from the chunk that made it match, until
``let_go`` (or ``at_most`` seconds, kept under the client's own bound for an answer: a hold
is a slow network, never a fault); the server has not seen it (no lock taken), the client
waits for its answer, and everything else on the proxy flows. ``holds`` counts the turns
held so far, ``holding`` says one is held now. ``forwarded`` counts the chunks carried each
way, ``taken`` the client connections taken, ``round_trips`` the times a client sent
something after an answer on its connection (what it sent before the answer came, a
pipeline, counts once: a bench counts a node's round trips with it).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from functools import partial
from typing import Self

from psycopg.conninfo import conninfo_to_dict, make_conninfo


class SilentProxy:
    """See the module docstring."""

    def __init__(self, host: str, port: int) -> None:
        self.upstream = (host, port)
        self.port = 0
        self.forwarded = 0
        self.round_trips = 0
        self.cuts = 0
        self.taken = 0
        """Client connections taken so far."""
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._marker: Callable[[bytes], bool] | None = None
        self._hold: Callable[[bytes], bool] | None = None
        self._hold_at_most = 0.0
        self._let_go = asyncio.Event()
        self.holds = 0
        """Client turns held so far (``hold``)."""
        self.holding = False
        """A client turn is held now."""
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: list[asyncio.StreamWriter] = []
        self._refusing = False

    @classmethod
    def to_database(cls, dsn: str) -> SilentProxy:
        """A proxy in front of the server ``dsn`` names (host and port)."""
        parts = conninfo_to_dict(dsn)
        return cls(str(parts.get("host") or "127.0.0.1"), int(str(parts.get("port") or 5432)))

    def dsn(self, dsn: str) -> str:
        """``dsn`` with its host and port replaced by the proxy's."""
        return make_conninfo(dsn, host="127.0.0.1", port=str(self.port))

    @property
    def silent(self) -> bool:
        return not self._flowing.is_set()

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._carry, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.mend()
        if self._server is not None:
            self._server.close()
        for writer in self._writers:
            writer.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    def cut(self) -> None:
        """Forward nothing from now on (sockets kept open)."""
        if self._flowing.is_set():
            self.cuts += 1
        self._flowing.clear()

    def cut_after(self, marker: bytes | Callable[[bytes], bool]) -> None:
        """Cut right after the next client chunk is forwarded whose connection's turn
        (what the client sent since the server last answered) contains ``marker`` (or is one
        for which it returns True)."""
        self._marker = marker if callable(marker) else partial(_contains, marker)

    def hold(self, marker: bytes | Callable[[bytes], bool], *, at_most: float) -> None:
        """Hold the next client turn that contains ``marker`` (or for which it returns True):
        not forwarded until ``let_go``, or ``at_most`` seconds (see the module docstring)."""
        self._hold = marker if callable(marker) else partial(_contains, marker)
        self._hold_at_most = at_most
        self._let_go.clear()

    def let_go(self) -> None:
        """Forward the turn held (and hold none that comes later)."""
        self._hold = None
        self._let_go.set()

    def refuse(self) -> None:
        """A peer that cannot be reached at all: close every connection carried now, and
        each one opened from now on as soon as it is taken, until the proxy mends."""
        self._refusing = True
        for writer in self._writers:
            writer.close()

    def mend(self) -> None:
        """Forward again (and take connections again)."""
        self._marker = None
        self._refusing = False
        self.let_go()
        self._flowing.set()

    async def _carry(
        self, client_in: asyncio.StreamReader, client_out: asyncio.StreamWriter
    ) -> None:
        self._writers.append(client_out)
        self.taken += 1
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._flowing.wait()
            if self._refusing:
                return
            try:
                server_in, server_out = await asyncio.open_connection(*self.upstream)
            except OSError:
                return
            self._writers.append(server_out)
            turn = _Turn()
            await asyncio.gather(
                self._pump(client_in, server_out, from_client=True, turn=turn),
                self._pump(server_in, client_out, from_client=False, turn=turn),
                return_exceptions=True,
            )
        finally:
            client_out.close()
            self._tasks.discard(task)

    async def _pump(
        self,
        source: asyncio.StreamReader,
        sink: asyncio.StreamWriter,
        *,
        from_client: bool,
        turn: _Turn,
    ) -> None:
        try:
            while True:
                await self._flowing.wait()
                chunk = await source.read(65536)
                if from_client and chunk:
                    if not turn.sent:
                        self.round_trips += 1
                    turn.sent += chunk
                    await self._held(turn.sent)
                await self._flowing.wait()  # read before a cut: held until the proxy mends
                if not chunk:
                    break
                sink.write(chunk)
                await sink.drain()
                self.forwarded += 1
                if not from_client:
                    turn.sent.clear()
                    continue
                marker = self._marker
                if marker is not None and marker(bytes(turn.sent)):
                    self._marker = None
                    self.cut()
        finally:
            sink.close()

    async def _held(self, sent: bytearray) -> None:
        """Wait here if ``sent`` (a client's turn so far) is the one to hold."""
        hold = self._hold
        if hold is None or not hold(bytes(sent)):
            return
        self._hold = None
        self.holds += 1
        self.holding = True
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._hold_at_most):
                    await self._let_go.wait()
        finally:
            self.holding = False


class _Turn:
    """What the client sent on one connection since the server last answered there (empty
    once the server has spoken): the pipeline the next round trip counts, and what a
    ``cut_after`` marker is matched against."""

    def __init__(self) -> None:
        self.sent = bytearray()


def _contains(marker: bytes, chunk: bytes) -> bool:
    return marker in chunk
