"""One aiohttp server at one address, its routes added and removed while it runs.

aiohttp freezes an application's router once it serves, so the server has one route of
its own, matching every path, that looks each request up among the routes served now: a
route added later (a channel started by a reload) is served at once, one removed answers
404 from then on, and a method the path is not served for 405. ``HEAD`` is answered by a
``GET`` route (aiohttp leaves the body out).

Each route counts the requests it is answering: ``unserve`` waits for them (a Telegram
update being handled is answered before its channel stops), for ``DRAIN_WAIT`` at most,
after which they are cancelled, as aiohttp's own shutdown would. Imported only when botd
serves something (``botd.http.routes``): it is what loads aiohttp.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from .routes import Handler

__all__ = ["DRAIN_WAIT", "RESPONSE_HEADERS", "HttpServer", "Served"]

log = logging.getLogger(__name__)

DRAIN_WAIT = 60.0
"""Seconds a removed route's requests get to be answered (aiohttp's shutdown timeout)."""
RESPONSE_HEADERS = web.RequestKey("botd.response_headers", dict[str, str])
"""The request key under which a handler (or a wrapper around one) puts headers that every
response to that request carries, a streamed one or an error included: they are set as the
response is prepared."""


class Served:
    """A handler served for one method and path, and the requests it is answering."""

    def __init__(self, method: str, path: str, handler: Handler) -> None:
        self.method = method
        self.path = path
        self.handler = handler
        self.answering: set[asyncio.Task[object]] = set()
        self._idle = asyncio.Event()
        self._idle.set()

    async def answer(self, request: web.Request) -> web.StreamResponse:
        task = asyncio.current_task()
        assert task is not None
        self.answering.add(task)
        self._idle.clear()
        try:
            return await self.handler(request)
        finally:
            self.answering.discard(task)
            if not self.answering:
                self._idle.set()

    async def drain(self, wait: float) -> None:
        """Until no request is being answered, or ``wait`` seconds (the rest cancelled)."""
        try:
            async with asyncio.timeout(wait):
                await self._idle.wait()
        except TimeoutError:
            log.warning(
                "%s %s: %d request(s) not answered in %g s, cancelled",
                self.method,
                self.path,
                len(self.answering),
                wait,
            )
            for task in list(self.answering):
                task.cancel()


class HttpServer:
    """An aiohttp server at ``host``:``port`` (see the module docstring)."""

    def __init__(self, host: str, port: int) -> None:
        self.address = (host, port)
        self._routes: dict[tuple[str, str], Served] = {}
        self._runner: web.AppRunner | None = None
        self._port = port
        app = web.Application()
        app.router.add_route("*", "/{path:.*}", self._dispatch)
        app.on_response_prepare.append(_add_headers)
        self._app = app

    @property
    def port(self) -> int:
        """The port listened on (the one bound, once started with port 0)."""
        return self._port

    async def start(self) -> None:
        """Listen; ``OSError`` when the address cannot be listened on."""
        runner = web.AppRunner(self._app, access_log=None, handle_signals=False)
        await runner.setup()
        try:
            site = web.TCPSite(runner, self.address[0], self.address[1])
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self._port = next(
            (int(address[1]) for address in runner.addresses if isinstance(address, tuple)),
            self._port,
        )
        log.debug("serving HTTP on %s:%d", self.address[0], self._port)

    async def stop(self) -> None:
        """Stop listening; the requests being answered are answered first. Safe twice."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    def serves(self, method: str, path: str) -> bool:
        return (method, path) in self._routes

    def serving(self) -> bool:
        """Whether any route is served here."""
        return bool(self._routes)

    def serve(self, method: str, path: str, handler: Handler) -> Served:
        """Answer ``method`` ``path`` with ``handler`` from now on (not served yet)."""
        if self.serves(method, path):
            raise ValueError(f"{method} {path} is served already")
        served = self._routes[(method, path)] = Served(method, path, handler)
        return served

    async def unserve(self, served: Served, wait: float = DRAIN_WAIT) -> None:
        """Answer no new request with ``served``; wait for those it is answering."""
        if self._routes.get((served.method, served.path)) is served:
            del self._routes[(served.method, served.path)]
        await served.drain(wait)

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        method = "GET" if request.method == "HEAD" else request.method
        served = self._routes.get((method, request.path))
        if served is not None:
            return await served.answer(request)
        allowed = {m for m, path in self._routes if path == request.path}
        if allowed:
            raise web.HTTPMethodNotAllowed(request.method, allowed)
        raise web.HTTPNotFound()


async def _add_headers(request: web.Request, response: web.StreamResponse) -> None:
    headers = request.get(RESPONSE_HEADERS)
    if headers:
        response.headers.update(headers)
