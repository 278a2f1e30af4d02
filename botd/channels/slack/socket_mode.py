"""Whether Slack's Socket Mode connection is up, told to the channel's ``PlatformLink``.

slack_sdk's Socket Mode client reconnects by itself (a socket Slack closed, one whose pings
go unanswered) and tells of the loss and of its failed attempts only in its log. A
``SocketWatch`` asks the client every ``interval`` seconds whether it is connected
(``is_connected``: a socket open, its pings answered) and tells the link. The error it
reports is the last failure the client logged (through the logger the watch hands the
handler, which goes on to botd's log as before), else that the socket is disconnected. A
new session (the SDK reconnected, however briefly the socket was down) is told to
``on_reconnect`` at the next look.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Callable

import aiohttp
from slack_sdk.socket_mode.aiohttp import SocketModeClient

from ...net.proxy import AiohttpProxy
from ..base import PlatformLink

__all__ = ["SocketWatch", "socket_through"]

WATCH_INTERVAL = 1.0
"""Seconds between two looks at the connection."""

_SESSION_ID = re.compile(r" ?\(?\bs_-?\d+\)?")
"""The SDK's session ids (``(s_1234)``): noise in a line a person reads."""


async def socket_through(client: SocketModeClient, proxy: AiohttpProxy) -> None:
    """Make ``client``'s socket connect through ``proxy`` (all None: direct, though the SDK
    read ``HTTPS_PROXY`` when it was built): an HTTP(S) proxy is the SDK's ``proxy``; a
    SOCKS one, the session the SDK made (and keeps for every reconnect), replaced by one
    over the proxy's connector. Before the first connect."""
    client.proxy = proxy.url
    if proxy.socks is not None:
        plain, client.aiohttp_client_session = (
            client.aiohttp_client_session,
            aiohttp.ClientSession(connector=proxy.connector()),
        )
        await plain.close()


class _LastFailure(logging.Handler):
    """Keeps the last warning or error logged through the watch's logger."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.text = ""

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):
            self.text = " ".join(_SESSION_ID.sub("", record.getMessage()).split())


class SocketWatch:
    """Watches one Socket Mode client for ``link`` (see the module docstring)."""

    def __init__(
        self,
        link: PlatformLink,
        account: str,
        interval: float = WATCH_INTERVAL,
        *,
        on_reconnect: Callable[[], None] | None = None,
    ) -> None:
        """``on_reconnect``: told each time the socket is connected again after it was not
        (what Slack sent meanwhile may be lost: the adapter catches up)."""
        self._link = link
        self._on_reconnect = on_reconnect
        self._interval = interval
        self.logger = logging.getLogger(f"{__name__}.{account}")
        """The logger to give the Socket Mode handler (``logger=``)."""
        self._failures = _LastFailure()
        self._task: asyncio.Task[None] | None = None

    def start(self, client: SocketModeClient) -> None:
        """Begin watching ``client`` (connected by now)."""
        if self._task is None:
            self.logger.addHandler(self._failures)
            self._task = asyncio.create_task(self._watch(client), name="slack-socket-watch")

    async def stop(self) -> None:
        task, self._task = self._task, None
        self.logger.removeHandler(self._failures)
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _watch(self, client: SocketModeClient) -> None:
        session = client.current_session
        while not client.closed:
            if await client.is_connected():
                self._failures.text = ""
                self._link.reachable()
                # A session other than the last seen: the SDK reconnected (maybe between
                # two looks, as it does at once when Slack closes a socket).
                if client.current_session is not session and self._on_reconnect is not None:
                    self._on_reconnect()
                session = client.current_session
            else:
                why = self._failures.text or "the socket is disconnected"
                self._link.unreachable(f"Socket Mode reconnecting: {why}")
            await asyncio.sleep(self._interval)
