"""A round-robin HTTP reverse proxy on loopback: the load balancer in front of several botd
nodes' webhook listeners.

Each request goes to the next upstream in turn, its body and headers passed on, the answer
passed back. An upstream that refuses the connection gets the client a 502, one that does not
answer within ``timeout`` seconds (a paused process: the kernel took the connection, nobody
reads it) a 504, as nginx or HAProxy would; the caller (Telegram) tries again later. Like
nginx's passive health check (``max_fails=1 fail_timeout=...``), an upstream that failed is
skipped for ``fail_timeout`` seconds while another one is up, so a paused node costs one
timeout per ``fail_timeout``, not one per request in turn. ``forwards`` records what each
request met: (upstream index, status; 502/504 for the proxy's own answers).
"""

from __future__ import annotations

import time
from typing import Self

import aiohttp
from aiohttp import web

from tests.fakes.loopback import serve

_HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "host", "content-length", "upgrade"}
)


class RoundRobinProxy:
    """See the module docstring; ``async with RoundRobinProxy(upstreams) as proxy``."""

    def __init__(
        self, upstreams: list[str], *, timeout: float = 1.0, fail_timeout: float = 3.0
    ) -> None:
        """``upstreams``: base URLs (``http://127.0.0.1:P``); a request's path is appended."""
        self.upstreams = list(upstreams)
        self.timeout = timeout
        self.fail_timeout = fail_timeout
        self.forwards: list[tuple[int, int]] = []
        """Every request: (upstream index, status the client got)."""
        self._next = 0
        self._failed_at: dict[int, float] = {}
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> Self:
        # One connection per request: a kept-alive one to a process since killed would turn
        # the next request's failure into a different one than a new connection meets.
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(force_close=True),
            timeout=aiohttp.ClientTimeout(total=self.timeout),
            auto_decompress=False,
        )
        app = web.Application()
        app.router.add_route("*", "/{path:.*}", self._forward)
        self._runner, self.port = await serve(app, shutdown_timeout=1)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    def _pick(self) -> int:
        """The next upstream in turn, passing over those that failed lately (unless all did)."""
        now = time.monotonic()
        for step in range(len(self.upstreams)):
            index = (self._next + step) % len(self.upstreams)
            if now - self._failed_at.get(index, -self.fail_timeout) >= self.fail_timeout:
                self._next = index + 1
                return index
        index = self._next % len(self.upstreams)
        self._next = index + 1
        return index

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        index = self._pick()
        target = self.upstreams[index] + request.path_qs
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        body = await request.read()
        try:
            async with self._session.request(
                request.method, target, headers=headers, data=body
            ) as answer:
                payload = await answer.read()
                status = answer.status
                kept = {k: v for k, v in answer.headers.items() if k.lower() not in _HOP_BY_HOP}
        except TimeoutError:
            return self._failed(index, 504)
        except aiohttp.ClientError:
            return self._failed(index, 502)
        self.forwards.append((index, status))
        return web.Response(status=status, body=payload, headers=kept)

    def _failed(self, index: int, status: int) -> web.Response:
        self._failed_at[index] = time.monotonic()
        self.forwards.append((index, status))
        return web.Response(status=status, text=f"upstream {index} failed\n")
