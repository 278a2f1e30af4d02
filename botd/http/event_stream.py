"""Server-sent event streams: one subscriber's bounded queue, and the response that writes it.

A ``Subscriber`` holds the events published to one client since it subscribed, at most
``limit`` of them unread; a client further behind is dropped rather than buffered for: its
queue is emptied, its stream ends (``next`` returns None), and the client, an EventSource,
reconnects and reads the state afresh. ``follow`` answers a request with a
``text/event-stream`` of a subscriber's events until it is dropped or closed, or the client
goes away (looked at every ``GONE_CHECK`` seconds: aiohttp does not cancel a handler whose
client left), with a comment every ``heartbeat`` seconds while nothing happens. The web page's
live updates (``botd.web.live``) and the web chat's conversations (``botd.channels.web``)
both stream this way. Imported only where botd serves HTTP (aiohttp).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Generic, Literal, TypeVar

from aiohttp import web

__all__ = ["GONE_CHECK", "Subscriber", "follow"]

GONE_CHECK = 0.5
"""Seconds between two looks at whether a stream's client went away."""

E = TypeVar("E")


class Subscriber(Generic[E]):
    """One client's events, at most ``limit`` unread (see the module docstring)."""

    def __init__(self, limit: int) -> None:
        self._queue: asyncio.Queue[E | None] = asyncio.Queue(maxsize=limit)
        self.dropped = False

    def put(self, event: E) -> bool:
        """Queue ``event``; False (and dropped) when the subscriber is too far behind."""
        if self.dropped:
            return False
        try:
            self._queue.put_nowait(event)
        except asyncio.QueueFull:
            self.close()
            return False
        return True

    def close(self) -> None:
        """End the stream: what is queued is dropped, ``next`` returns None."""
        self.dropped = True
        while not self._queue.empty():
            self._queue.get_nowait()
        self._queue.put_nowait(None)

    async def next(self, wait: float) -> E | Literal[False] | None:
        """The next event; None once dropped; False when none came within ``wait`` seconds."""
        try:
            return await asyncio.wait_for(self._queue.get(), wait)
        except TimeoutError:
            return None if self.dropped else False


async def follow(
    request: web.Request,
    subscriber: Subscriber[E],
    encode: Callable[[E], bytes],
    *,
    heartbeat: float,
    greeting: bytes = b"",
) -> web.StreamResponse:
    """Answer ``request`` with ``subscriber``'s events, each as ``encode`` writes it, after
    ``greeting`` (see the module docstring)."""
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-store",
            "X-Accel-Buffering": "no",
        }
    )
    await response.prepare(request)
    try:
        if greeting:
            await response.write(greeting)
        idle = 0.0
        while not _gone(request):
            event = await subscriber.next(min(GONE_CHECK, heartbeat))
            if event is None:
                break
            if event is False:
                idle += min(GONE_CHECK, heartbeat)
                if idle >= heartbeat:
                    await response.write(b": heartbeat\n\n")
                    idle = 0.0
                continue
            await response.write(encode(event))
    except ConnectionError:  # the client went away
        pass
    return response


def _gone(request: web.Request) -> bool:
    """Whether ``request``'s client went away."""
    transport = request.transport
    return transport is None or transport.is_closing()
