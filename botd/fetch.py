"""Fetching a URL with an address guard (a stand-in until the shared fetcher lands).

``fetch`` refuses hosts that resolve to loopback, private, link-local, reserved or metadata
addresses unless they are in ``allow_hosts``; the check runs after DNS resolution and again
on every redirect. The body is streamed and cut off past ``max_bytes``.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Collection
from dataclasses import dataclass
from email.message import Message
from urllib.parse import unquote, urljoin, urlsplit

import httpx


class FetchFailed(Exception):
    """One line a user may read: network error, HTTP error status, too large, bad URL."""


class FetchRefused(FetchFailed):
    """The URL's host resolves to an address that is not public and is not allowed."""


@dataclass(frozen=True, slots=True)
class Fetched:
    url: str
    status: int
    content_type: str
    charset: str | None
    body: bytes
    filename: str


def _allowed(host: str, addresses: list[str], allow_hosts: Collection[str]) -> bool:
    for entry in allow_hosts:
        if entry.lower() == host.lower():
            return True
        try:
            network = ipaddress.ip_network(entry, strict=False)
        except ValueError:
            continue
        if any(ipaddress.ip_address(a) in network for a in addresses):
            return True
    return False


async def _guard(url: str, allow_hosts: Collection[str]) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise FetchFailed(f"not an http(s) URL: {url}")
    host = parts.hostname
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise FetchFailed(f"cannot resolve {host}: {exc}") from exc
    addresses = [str(info[4][0]) for info in infos]
    if _allowed(host, addresses, allow_hosts):
        return
    for address in addresses:
        ip = ipaddress.ip_address(address.split("%")[0])
        if not ip.is_global or ip.is_multicast:
            raise FetchRefused(f"refused: {host} resolves to a non-public address ({ip})")


def _filename(url: str, disposition: str | None) -> str:
    if disposition:
        message = Message()
        message["content-disposition"] = disposition
        name = message.get_filename()
        if name:
            return name.replace("/", "_")
    segment = unquote(urlsplit(url).path.rsplit("/", 1)[-1])
    return segment or "file"


async def fetch(
    url: str,
    *,
    allow_hosts: Collection[str] = (),
    max_bytes: int,
    timeout: float = 20.0,
    max_redirects: int = 5,
) -> Fetched:
    """GET ``url`` (see the module docstring)."""
    async with httpx.AsyncClient(timeout=timeout, follow_redirects=False) as client:
        for _ in range(max_redirects + 1):
            await _guard(url, allow_hosts)
            try:
                async with client.stream("GET", url) as response:
                    if response.is_redirect:
                        url = urljoin(url, response.headers.get("location", ""))
                        continue
                    if response.status_code >= 400:
                        raise FetchFailed(f"HTTP {response.status_code} from {url}")
                    body = bytearray()
                    async for chunk in response.aiter_bytes():
                        body.extend(chunk)
                        if len(body) > max_bytes:
                            raise FetchFailed(f"larger than {max_bytes} bytes: {url}")
                    media = response.headers.get("content-type", "").partition(";")[0]
                    charset = response.charset_encoding
                    return Fetched(
                        str(response.url),
                        response.status_code,
                        media.strip().lower(),
                        charset,
                        bytes(body),
                        _filename(url, response.headers.get("content-disposition")),
                    )
            except httpx.HTTPError as exc:
                raise FetchFailed(f"fetching {url} failed: {exc}") from exc
        raise FetchFailed(f"too many redirects: {url}")


__all__ = ["FetchFailed", "FetchRefused", "Fetched", "fetch"]
