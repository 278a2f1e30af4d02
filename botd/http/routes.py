"""Routes on botd's HTTP servers, one server per address (see the package docstring).

``HttpServers.add`` serves a handler for one method and path at a host and port, starting
the server for that address if none runs there yet, and returns the ``Route``; its ``remove``
stops new requests reaching the handler, waits for those it is answering, and stops the
server once no route is left on it. ``HttpServers`` is one of the App's services: its close
stops every server.

A handler is aiohttp's (a ``web.Request`` in, a response out); aiohttp itself is imported by
``botd.http.server`` only, when the first route is added.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from aiohttp import web

    from .server import HttpServer, Served

__all__ = ["CannotListen", "Handler", "HttpServers", "Route", "Routes"]

log = logging.getLogger(__name__)

Handler = Callable[["web.Request"], Awaitable["web.StreamResponse"]]
"""Answers one request (aiohttp's handler)."""


class CannotListen(OSError):
    """No server can listen at the address asked for (taken, or not this host's), or the
    method and path are served there already; ``strerror`` says which, ``where`` is the
    address (``127.0.0.1:8480``)."""

    def __init__(self, code: int, strerror: str, where: str) -> None:
        super().__init__(code, strerror)
        self.where = where


class Route(Protocol):
    """One method and path served at an address (what ``Routes.add`` returns)."""

    @property
    def port(self) -> int:
        """The port its server listens on (the one bound, when port 0 was asked for)."""
        ...

    async def remove(self) -> None:
        """Stop serving it; the requests it is answering are answered first. Safe twice."""
        ...


class Routes(Protocol):
    """Where a part serves HTTP (``HttpServers`` is one): what a channel adapter is given."""

    async def add(self, method: str, path: str, handler: Handler, *, host: str, port: int) -> Route:
        """Serve ``handler`` for ``method`` ``path`` at ``host``:``port``. Raises
        ``CannotListen`` when nothing can listen there or the path is served already."""
        ...


class _Added:
    """A route added by ``HttpServers`` (its ``Route``)."""

    def __init__(self, servers: HttpServers, server: HttpServer, served: Served) -> None:
        self._servers = servers
        self._server = server
        self._served: Served | None = served

    @property
    def port(self) -> int:
        return self._server.port

    async def remove(self) -> None:
        served, self._served = self._served, None
        if served is not None:
            await self._servers.release(self._server, served)


class HttpServers:
    """The HTTP servers botd runs, one per address served (see the module docstring)."""

    name = "http"

    def __init__(self) -> None:
        self._servers: dict[tuple[str, int], HttpServer] = {}
        self._changing = asyncio.Lock()
        """Held while a server starts or stops: two parts adding a route at one new address
        get one server."""

    async def add(self, method: str, path: str, handler: Handler, *, host: str, port: int) -> Route:
        async with self._changing:
            server = self._servers.get((host, port))
            where = f"{host}:{port}"
            if server is None:
                from .server import HttpServer  # aiohttp: only once something is served

                server = HttpServer(host, port)
                try:
                    await server.start()
                except OSError as exc:
                    # asyncio words a failed bind its own way; the errno says it plainly.
                    why = os.strerror(exc.errno) if exc.errno else str(exc)
                    raise CannotListen(exc.errno or 0, why, where) from None
                self._servers[(host, port)] = server
            elif server.serves(method, path):
                why = f"{method} {path} is served there already"
                raise CannotListen(errno.EADDRINUSE, why, where)
            served = server.serve(method, path, handler)
        return _Added(self, server, served)

    async def release(self, server: HttpServer, served: Served) -> None:
        """Take ``served`` off ``server`` (its requests answered first); a server left
        without routes stops."""
        await server.unserve(served)
        async with self._changing:
            await self._stop_if_unused(server)

    async def _stop_if_unused(self, server: HttpServer) -> None:
        if server.serving() or self._servers.get(server.address) is not server:
            return
        del self._servers[server.address]
        await server.stop()

    def listening(self) -> list[tuple[str, int]]:
        """The addresses served now, each with the port bound."""
        return [(server.address[0], server.port) for server in self._servers.values()]

    async def start(self) -> None:
        """Nothing to start: a server listens once a route is added at its address."""

    async def close(self) -> None:
        """Stop every server (the requests they are answering are answered first)."""
        async with self._changing:
            servers, self._servers = list(self._servers.values()), {}
            for server in servers:
                await server.stop()
