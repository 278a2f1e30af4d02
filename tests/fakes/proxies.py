"""Two proxies on loopback that record what went through them: ``HttpProxy`` (CONNECT
tunnels and plain forwarding of ``http://`` and ``ws://`` requests) and ``Socks5Proxy``
(RFC 1928's CONNECT, without authentication or with RFC 1929's username and password).

    async with HttpProxy(user="bob", password="s3cret") as proxy:
        proxy.url                      # http://bob:s3cret@127.0.0.1:<port>
        proxy.passages                 # each connection carried: kind, host, port
        proxy.requests                 # (port, path) of each plain HTTP request seen
        proxy.reached(port)            # whether one went to 127.0.0.1:<port>
        proxy.refused                  # connections refused for their credentials

Each carried connection is piped both ways until either side closes. A forwarded request
goes out with ``Connection: close`` and its answer comes back with it (so a client never
sends the next request for another host on the same connection), except an ``Upgrade`` (a
websocket), which stays open as a tunnel. Wrong or missing credentials: the HTTP proxy
answers 407, the SOCKS5 proxy fails the authentication (status 1), and both close.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ipaddress
import re
import struct
from dataclasses import dataclass
from typing import Self
from urllib.parse import quote, urlsplit

HEAD_LIMIT = 64 * 1024
_HTTP_REQUEST = re.compile(rb"[A-Z]+ (/\S*) HTTP/1\.[01]\r\n")


@dataclass(frozen=True)
class Passage:
    """One connection a proxy carried."""

    kind: str
    """``CONNECT`` (a tunnel), the forwarded request's method (``GET``, ``POST``) or ``SOCKS``."""
    host: str
    port: int
    path: str = ""
    """A forwarded request's path ('' for a tunnel)."""


class _Proxy:
    scheme = ""

    def __init__(self, *, user: str | None = None, password: str | None = None) -> None:
        self.user = user
        self.password = password
        self.port = 0
        self.passages: list[Passage] = []
        self.refused = 0
        """Connections refused for missing or wrong credentials."""
        self.requests: list[tuple[int, str]] = []
        """The port and path of each plain HTTP request seen: each one the HTTP proxy
        forwarded, each one that starts a chunk in a SOCKS5 tunnel (the fakes speak plain
        HTTP; what a TLS tunnel carries is not read)."""
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        """The proxy's URL, its credentials in it."""
        credentials = ""
        if self.user is not None:
            credentials = f"{quote(self.user, safe='')}:{quote(self.password or '', safe='')}@"
        return f"{self.scheme}://{credentials}127.0.0.1:{self.port}"

    def url_with(self, user: str, password: str) -> str:
        """The proxy's URL with other credentials (a wrong password)."""
        credentials = f"{quote(user, safe='')}:{quote(password, safe='')}"
        return f"{self.scheme}://{credentials}@127.0.0.1:{self.port}"

    def reached(self, port: int) -> bool:
        """Whether a connection to ``127.0.0.1:port`` went through."""
        return any(p.port == port for p in self.passages)

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._carry(reader, writer)
        except (OSError, asyncio.IncompleteReadError, ValueError):
            pass  # a client or server gone: nothing more to carry
        finally:
            self._tasks.discard(task)
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    async def _carry(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            writer.write_eof() if writer.can_write_eof() else writer.close()


async def _both_ways(
    client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    server: tuple[asyncio.StreamReader, asyncio.StreamWriter],
) -> None:
    try:
        await asyncio.gather(_pipe(client[0], server[1]), _pipe(server[0], client[1]))
    finally:
        server[1].close()


def _split_head(head: bytes) -> tuple[str, list[tuple[str, str]]]:
    lines = head.decode("latin-1").split("\r\n")
    headers = []
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers.append((name.strip(), value.strip()))
    return lines[0], headers


def _join_head(first: str, headers: list[tuple[str, str]]) -> bytes:
    return (first + "\r\n" + "".join(f"{n}: {v}\r\n" for n, v in headers) + "\r\n").encode(
        "latin-1"
    )


class HttpProxy(_Proxy):
    """See the module docstring."""

    scheme = "http"

    def _admits(self, headers: list[tuple[str, str]]) -> bool:
        if self.user is None:
            return True
        expected = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
        given = [v for n, v in headers if n.lower() == "proxy-authorization"]
        return given == [f"Basic {expected}"]

    async def _carry(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        if len(head) > HEAD_LIMIT:
            return
        first, headers = _split_head(head[:-4])
        method, target, version = first.split(" ", 2)
        if not self._admits(headers):
            self.refused += 1
            writer.write(
                b"HTTP/1.1 407 Proxy Authentication Required\r\n"
                b'Proxy-Authenticate: Basic realm="fake"\r\n'
                b"Content-Length: 0\r\nConnection: close\r\n\r\n"
            )
            await writer.drain()
            return
        if method == "CONNECT":
            name, _, number = target.rpartition(":")
            upstream = await asyncio.open_connection(name.strip("[]"), int(number))
            self.passages.append(Passage("CONNECT", name.strip("[]"), int(number)))
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await writer.drain()
            await _both_ways((reader, writer), upstream)
            return
        parts = urlsplit(target)
        host, port = parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        upgrade = any(n.lower() == "upgrade" for n, _ in headers)
        kept = [
            (n, v)
            for n, v in headers
            if n.lower() not in ("proxy-authorization", "proxy-connection")
            and (upgrade or n.lower() not in ("connection", "keep-alive"))
        ]
        if not upgrade:
            kept.append(("Connection", "close"))
        upstream = await asyncio.open_connection(host, port)
        self.passages.append(Passage(method, host, port, path))
        self.requests.append((port, path))
        upstream[1].write(_join_head(f"{method} {path} {version}", kept))
        await upstream[1].drain()
        if upgrade:
            await _both_ways((reader, writer), upstream)
            return
        # The body goes on as it comes; the answer's head comes back with Connection: close,
        # then the rest of the answer as it comes.
        sending = asyncio.create_task(_pipe(reader, upstream[1]))
        try:
            answer = await upstream[0].readuntil(b"\r\n\r\n")
            status, answer_headers = _split_head(answer[:-4])
            answer_headers = [(n, v) for n, v in answer_headers if n.lower() != "connection"]
            writer.write(_join_head(status, [*answer_headers, ("Connection", "close")]))
            await writer.drain()
            await _pipe(upstream[0], writer)
        finally:
            sending.cancel()
            await asyncio.gather(sending, return_exceptions=True)
            upstream[1].close()


class Socks5Proxy(_Proxy):
    """See the module docstring."""

    scheme = "socks5"

    async def _carry(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        version, count = await reader.readexactly(2)
        if version != 5:
            return
        methods = await reader.readexactly(count)
        wanted = 0 if self.user is None else 2
        if wanted not in methods:
            self.refused += 1
            writer.write(b"\x05\xff")
            await writer.drain()
            return
        writer.write(bytes([5, wanted]))
        await writer.drain()
        if wanted == 2:
            _, size = await reader.readexactly(2)
            user = (await reader.readexactly(size)).decode()
            (size,) = await reader.readexactly(1)
            password = (await reader.readexactly(size)).decode()
            if (user, password) != (self.user, self.password):
                self.refused += 1
                writer.write(b"\x01\x01")
                await writer.drain()
                return
            writer.write(b"\x01\x00")
            await writer.drain()
        _, command, _, kind = await reader.readexactly(4)
        if kind == 1:
            host = str(ipaddress.IPv4Address(await reader.readexactly(4)))
        elif kind == 4:
            host = str(ipaddress.IPv6Address(await reader.readexactly(16)))
        else:
            (size,) = await reader.readexactly(1)
            host = (await reader.readexactly(size)).decode()
        (port,) = struct.unpack("!H", await reader.readexactly(2))
        if command != 1:  # CONNECT only
            writer.write(b"\x05\x07\x00\x01\x00\x00\x00\x00\x00\x00")
            await writer.drain()
            return
        try:
            upstream = await asyncio.open_connection(host, port)
        except OSError:
            writer.write(b"\x05\x05\x00\x01\x00\x00\x00\x00\x00\x00")
            await writer.drain()
            return
        self.passages.append(Passage("SOCKS", host, port))
        writer.write(b"\x05\x00\x00\x01\x00\x00\x00\x00\x00\x00")
        await writer.drain()
        try:
            await asyncio.gather(
                self._sniffing(reader, upstream[1], port), _pipe(upstream[0], writer)
            )
        finally:
            upstream[1].close()

    async def _sniffing(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, port: int
    ) -> None:
        """``_pipe``, noting each plain HTTP request that starts a chunk (``requests``)."""
        try:
            while chunk := await reader.read(65536):
                request = _HTTP_REQUEST.match(chunk)
                if request is not None:
                    self.requests.append((port, request[1].decode("latin-1")))
                writer.write(chunk)
                await writer.drain()
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                writer.write_eof() if writer.can_write_eof() else writer.close()


__all__ = ["HttpProxy", "Passage", "Socks5Proxy"]
