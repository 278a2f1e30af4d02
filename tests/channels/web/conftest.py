"""Fixtures of the web chat's tests: its routes served on a real HTTP server, as the page's
console serves them (without its guard: ``botd.web`` adds that)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp

from botd.channels.web.routes import ChatRoute
from botd.http.routes import HttpServers, Route
from tests.support.waiting import until


@asynccontextmanager
async def served(routes: list[ChatRoute], http: HttpServers | None = None) -> AsyncIterator[str]:
    """``routes`` served on loopback (on ``http``, else servers of their own) for the block;
    the base URL."""
    servers = HttpServers() if http is None else http
    added: list[Route] = []
    try:
        for method, path, handler, _writes in routes:
            # One server: the servers are kept by the address asked for (port 0 here).
            added.append(await servers.add(method, path, handler, host="127.0.0.1", port=0))
        yield f"http://127.0.0.1:{added[0].port}"
    finally:
        for route in added:
            await route.remove()
        if http is None:
            await servers.close()


class EventStream:
    """A client of a ``text/event-stream``: every event read so far (name, JSON object) and
    every comment, read in the background until ``close``."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.comments: list[str] = []
        self.ended = False
        self._response = response
        self._task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        name, data = "message", ""
        async for raw in self._response.content:
            line = raw.decode().rstrip("\n")
            if line.startswith(":"):
                self.comments.append(line[1:].strip())
            elif line.startswith("event: "):
                name = line.removeprefix("event: ")
            elif line.startswith("data: "):
                data += line.removeprefix("data: ")
            elif not line and data:
                self.events.append((name, json.loads(data)))
                name, data = "message", ""
        self.ended = True

    async def close(self) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        self._response.close()


@asynccontextmanager
async def following(session: aiohttp.ClientSession, url: str) -> AsyncIterator[EventStream]:
    """An ``EventStream`` of ``url`` for the block (its first comment read: subscribed)."""
    response = await session.get(url)
    assert response.status == 200, await response.text()
    assert response.content_type == "text/event-stream"
    stream = EventStream(response)
    try:
        await until(lambda: stream.comments, "the stream's first comment")
        yield stream
    finally:
        await stream.close()
