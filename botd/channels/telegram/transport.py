"""The HTTP transport of the Telegram adapter's sends: httpx over asyncio streams that checks
the lease of the conversation a send is made for (its ``Fence``) as it writes each buffer of
a request.

Telegram takes no key that would make a late request harmless, so a request of a lease's old
holder must not reach it once another node may hold the lease. A check made before the
request only narrows that: httpx and its default network layer yield to the event loop
between the check, the headers and the body, and a node frozen (SIGSTOP) in between would
finish the request when it thaws, after the takeover. Here each buffer is checked and handed
to the socket in one step, with nothing in between that can wait: what the kernel already
has goes out even while the node is frozen (before any takeover), and what it does not have
is not written after it thaws. A request cut between its headers and its body is never
carried out: its connection is closed (httpcore does not reuse it).

What remains is a request already in the network when the lease ends (a retransmission,
a slow link): its size is the network's delay, not the node's.

Where the section names a proxy (``proxy:``), or the environment names one for the Bot API
(``HTTPS_PROXY`` and the like, which httpx honours) and the section does not say ``direct``,
httpx's own transport is kept so the sends go through it, and the lease is checked as each
request starts instead (an httpx request hook). ``updates_request`` is the long poll's pool,
through the same proxy.

How the fence reaches the socket: the adapter is given it with each send (``SendScope``), but
python-telegram-bot takes no per-request argument that reaches httpx (``Bot.send_message``
-> ``BaseRequest.post`` -> ``HTTPXRequest.do_request`` -> ``httpx.AsyncClient.request``
carry the API's parameters only), and httpcore hands a request's extensions to its
connection, not to the stream that writes it. So the adapter sets it, around the SDK calls
of the one send it was given for (``fenced_requests``), in a context variable private to
this module, which the stream (or the hook) reads at write time: the one context variable
that carries a fence in botd, a bridge across an SDK with no other way through, set only
here from a fence passed explicitly.
"""

from __future__ import annotations

import asyncio
import contextlib
import select
import socket
import ssl
import time
from collections.abc import Iterable, Iterator
from contextvars import ContextVar
from typing import Any
from urllib.parse import urlsplit
from urllib.request import getproxies, proxy_bypass

import httpcore
import httpx
from telegram.request import HTTPXRequest

from ...cluster.fencing import Fence
from ...config.proxy import DIRECT
from ...net.proxy import httpx_options
from ...net.tls import verified_context

_fence: ContextVar[Fence | None] = ContextVar("botd_telegram_fence", default=None)
"""The fence of the send whose SDK calls run now (the bridge: see the module docstring)."""


@contextlib.contextmanager
def fenced_requests(fence: Fence | None) -> Iterator[None]:
    """Within the block (the SDK calls of one send), every request is checked against
    ``fence`` as it is written (None: unfenced)."""
    token = _fence.set(fence)
    try:
        yield
    finally:
        _fence.reset(token)


def _check_fence() -> None:
    fence = _fence.get()
    if fence is not None:
        fence.check_send(time.monotonic())


async def _check_fence_hook(_request: httpx.Request) -> None:
    """``_check_fence`` as an httpx request hook (each request as it starts)."""
    _check_fence()


class _CheckedStream(httpcore.AsyncNetworkStream):
    """One connection: an asyncio stream pair, checked before each write."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        try:
            async with asyncio.timeout(timeout):
                return await self._reader.read(max_bytes)
        except TimeoutError as exc:
            raise httpcore.ReadTimeout(str(exc)) from exc
        except OSError as exc:
            raise httpcore.ReadError(str(exc)) from exc

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        _check_fence()  # then straight to the socket: no await in between
        try:
            self._writer.write(buffer)
            async with asyncio.timeout(timeout):
                await self._writer.drain()
        except TimeoutError as exc:
            raise httpcore.WriteTimeout(str(exc)) from exc
        except OSError as exc:
            raise httpcore.WriteError(str(exc)) from exc

    async def aclose(self) -> None:
        self._writer.close()
        with contextlib.suppress(OSError, ssl.SSLError):  # a broken connection: nothing to say
            await self._writer.wait_closed()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            async with asyncio.timeout(timeout):
                await self._writer.start_tls(ssl_context, server_hostname=server_hostname)
        except TimeoutError as exc:
            await self.aclose()
            raise httpcore.ConnectTimeout(str(exc)) from exc
        except (OSError, ssl.SSLError) as exc:
            await self.aclose()
            raise httpcore.ConnectError(str(exc)) from exc
        return self

    def get_extra_info(self, info: str) -> Any:
        if info == "ssl_object":
            return self._writer.get_extra_info("ssl_object")
        if info == "client_addr":
            return self._writer.get_extra_info("sockname")
        if info == "server_addr":
            return self._writer.get_extra_info("peername")
        sock: socket.socket | None = self._writer.get_extra_info("socket")
        if info == "socket":
            return sock
        if info == "is_readable":
            # An idle connection with something to read was closed by the server (or sent
            # what nobody asked for): httpcore does not reuse it.
            if sock is None or self._reader.at_eof():
                return True
            try:
                readable, _, _ = select.select([sock], [], [], 0)
            except (OSError, ValueError):
                return True
            return bool(readable)
        return None


class _CheckedBackend(httpcore.AsyncNetworkBackend):
    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_connection(
                    host, port, local_addr=(local_address, 0) if local_address else None
                )
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout(str(exc)) from exc
        except OSError as exc:
            raise httpcore.ConnectError(str(exc)) from exc
        sock = writer.get_extra_info("socket")
        for option in socket_options or ():
            sock.setsockopt(*option)
        return _CheckedStream(reader, writer)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("the Telegram adapter does not connect over Unix sockets")

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class FencedTransport(httpx.AsyncHTTPTransport):
    """httpx's transport (HTTP/1.1, TLS verified as httpx does) over the checked streams."""

    def __init__(self, *, max_connections: int) -> None:
        limits = httpx.Limits(max_connections=max_connections)
        verified = verified_context()
        super().__init__(verify=verified, limits=limits)
        # httpx offers no way to name the network layer, so its pool is built again here
        # with the same settings and this module's backend.
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=verified,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            http1=True,
            http2=False,
            network_backend=_CheckedBackend(),
        )


def sends_request(api_base_url: str, proxy: str | None = None) -> HTTPXRequest:
    """The request pool of the adapter's sends: over ``FencedTransport``, or over httpx's
    own transport through ``proxy`` (the section's ``proxy:``), or through the proxy the
    environment names for ``api_base_url`` when ``proxy`` is unset."""
    if proxy is None:
        parts = urlsplit(api_base_url)
        proxies = getproxies()
        if (parts.scheme in proxies or "all" in proxies) and not proxy_bypass(parts.hostname or ""):
            proxy = proxies.get(parts.scheme) or proxies["all"]
    if proxy is not None and proxy != DIRECT:
        hooks = {"request": [_check_fence_hook]}
        return HTTPXRequest(
            proxy=proxy, httpx_kwargs={"verify": verified_context(), "event_hooks": hooks}
        )
    # trust_env off: the environment was read above (and ``direct`` says not to read it).
    transport = FencedTransport(max_connections=256)
    return HTTPXRequest(httpx_kwargs={"transport": transport, "trust_env": False})


def updates_request(proxy: str | None = None) -> HTTPXRequest:
    """The long poll's request pool (one connection), through ``proxy`` (unset: the
    environment's, as httpx reads it)."""
    return HTTPXRequest(
        connection_pool_size=1, httpx_kwargs={"verify": verified_context(), **httpx_options(proxy)}
    )


__all__ = ["FencedTransport", "fenced_requests", "sends_request", "updates_request"]
