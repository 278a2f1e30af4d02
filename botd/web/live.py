"""The page's live updates: ``GET /api/events``, server-sent events.

``Live`` has named sources (``status``, ``conversations``, ``approvals``: each an async read
returning JSON data). One poller, shared by every page open, reads them all every
``interval`` seconds while at least one page listens, and sends a source as an event of its
name whenever its JSON differs from what was sent last; a page that connects gets the last of
each at once. ``poke`` reads them now (a decision made on the page shows at once). A page
that reads too slowly to keep up (``BACKLOG`` events unread) is dropped: its EventSource
reconnects and starts again from the latest. The streams are ``botd.http.event_stream``'s: a
comment every ``KEEPALIVE`` seconds while nothing changes, a page gone away noticed within half
a second. ``close`` ends every stream and the poller.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiohttp import web

from ..http.event_stream import Subscriber, follow

__all__ = ["BACKLOG", "KEEPALIVE", "Live"]

log = logging.getLogger(__name__)

BACKLOG = 64
KEEPALIVE = 15.0

Source = Callable[[], Awaitable[Any]]
_Event = tuple[str, str]
"""An event's name and JSON data."""


class Live:
    """The event streams of the pages open, and their one poller (see the module
    docstring)."""

    def __init__(self, sources: Mapping[str, Source], *, interval: float = 1.0) -> None:
        self._sources = dict(sources)
        self._interval = interval
        self._last: dict[str, str] = {}
        self._streams: set[Subscriber[_Event]] = set()
        self._poller: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._closed = False

    def listening(self) -> int:
        """How many pages listen now."""
        return len(self._streams)

    def poke(self) -> None:
        """Read the sources now rather than at the next tick."""
        self._wake.set()

    async def stream(self, request: web.Request) -> web.StreamResponse:
        """``GET /api/events``: the events until the page goes or botd stops."""
        if self._closed:
            raise web.HTTPServiceUnavailable()
        subscriber: Subscriber[_Event] = Subscriber(BACKLOG)
        for event in self._last.items():
            subscriber.put(event)
        self._streams.add(subscriber)
        self._start_polling()
        try:
            return await follow(request, subscriber, _encoded, heartbeat=KEEPALIVE)
        finally:
            self._streams.discard(subscriber)

    def _start_polling(self) -> None:
        if self._poller is None or self._poller.done():
            self._poller = asyncio.create_task(self._poll(), name="web-live")

    async def _poll(self) -> None:
        while self._streams and not self._closed:
            self._wake.clear()
            for name, read in self._sources.items():
                try:
                    data = json.dumps(await read(), sort_keys=True)
                except Exception as exc:
                    log.warning("web: %s could not be read: %s", name, exc)
                    continue
                if self._last.get(name) != data:
                    self._last[name] = data
                    self._send((name, data))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._interval):
                    await self._wake.wait()
        self._last.clear()  # read afresh when a page listens again

    def _send(self, event: _Event) -> None:
        for subscriber in list(self._streams):
            if not subscriber.put(event):  # too far behind: its stream ends
                self._streams.discard(subscriber)

    async def close(self) -> None:
        """End every stream and the poller; safe twice."""
        self._closed = True
        for subscriber in list(self._streams):
            subscriber.close()
        poller, self._poller = self._poller, None
        if poller is not None:
            poller.cancel()
            await asyncio.wait({poller})


def _encoded(event: _Event) -> bytes:
    name, data = event
    return f"event: {name}\ndata: {data}\n\n".encode()
