"""Faults the loopback fakes inject below HTTP: a connection reset, a server that went away.

``reset(request)`` ends a request's connection with a TCP reset (``SO_LINGER`` 0, then
abort), so the client sees ``ECONNRESET`` with no answer, as when a proxy or a crashing
server drops it. ``Outage`` closes a fake's listening socket, so new connections are
refused, and resets every request on a connection that was already open; ``end()`` listens
again on the same port.
"""

from __future__ import annotations

import socket
import struct

from aiohttp import web


def reset(request: web.Request) -> web.Response:
    """Drop ``request``'s connection with a reset; the returned response is never written."""
    transport = request.transport
    if transport is not None:
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()
    return web.Response(status=503)


class Outage:
    """A fake's server gone: ``begin()`` stops listening, ``end()`` listens again."""

    def __init__(self, runner: web.AppRunner, port: int) -> None:
        self._runner = runner
        self._port = port
        self.active = False

    async def begin(self) -> None:
        self.active = True
        for site in list(self._runner.sites):
            await site.stop()

    async def end(self) -> None:
        site = web.TCPSite(self._runner, "127.0.0.1", self._port)
        await site.start()
        self.active = False
