"""Fetching a URL someone in a chat (or the model) named, without reaching what it must not.

A URL from a chat can point anywhere: at the machine botd runs on (``127.0.0.1:8480``), at
the private network behind it, or at a cloud's metadata service (``169.254.169.254``), which
hands out credentials. ``fetch`` refuses every address that is not public unless the operator
listed the host in ``allow_hosts``. The check runs on the addresses the name resolves to, and
the connection is then made to the very address that was checked (the host name still goes
in the ``Host`` header and TLS's server name), so a name that resolves to a public address
for the check and to a private one a moment later gains nothing. Redirects are followed by
hand, each hop checked the same way. Headers a caller adds (an API key, ``headers``) go only
to the first URL's origin (scheme, host, port): a redirect elsewhere does not take them along.

The body is read by ``botd.net.capped_body``: given up past ``max_bytes``, counted after decoding
as the decoding happens, so a small compressed body cannot expand without limit. At most one
content encoding is taken (gzip or deflate): stacked encodings (``gzip, gzip``), an encoding
botd does not decode (``br``, ``zstd``) and a broken stream are a ``FetchFailed`` line.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from email.message import Message as _HeaderParser
from urllib.parse import unquote, urljoin, urlsplit

import httpx

from .capped_body import ACCEPT_ENCODING, BodyTooLarge, BodyUnreadable, read_capped_body
from .tls import verified_context

__all__ = ["AddressRules", "FetchFailed", "FetchRefused", "Fetched", "fetch"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_USER_AGENT = "botd (+https://github.com/botd)"


class FetchFailed(Exception):
    """A fetch that did not give a body: the message is one line a user may read."""


class FetchRefused(FetchFailed):
    """The URL points at an address botd does not fetch from (not public, not allowed)."""


@dataclass(frozen=True, slots=True)
class Fetched:
    """A fetched body and what the server said about it."""

    url: str
    """The final URL, after redirects."""
    status: int
    content_type: str
    """The media type, lowercased, without parameters ('' when the server gave none)."""
    charset: str | None
    body: bytes
    filename: str
    """From Content-Disposition, else the URL's last path segment, else ``file``."""


class AddressRules:
    """Which hosts and addresses may be fetched: public addresses, plus the allowed list.

    ``allow_hosts`` holds host names (matched case-insensitively against the URL's host; a
    leading ``*.`` matches any subdomain), IP addresses and CIDR networks (matched against the
    resolved addresses).
    """

    def __init__(self, allow_hosts: Iterable[str] = ()) -> None:
        self._names: set[str] = set()
        self._suffixes: list[str] = []
        self._networks: list[IPNetwork] = []
        for entry in allow_hosts:
            entry = entry.strip().lower().rstrip(".")
            if not entry:
                continue
            try:
                self._networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
                continue
            except ValueError:
                pass
            if entry.startswith("*."):
                self._suffixes.append(entry[1:])
            else:
                self._names.add(entry)

    def host_allowed(self, host: str) -> bool:
        """Whether the operator listed ``host`` by name."""
        host = host.lower().rstrip(".")
        return host in self._names or any(host.endswith(s) for s in self._suffixes)

    def address_refusal(self, address: IPAddress) -> str | None:
        """Why ``address`` may not be fetched from, or None when it may."""
        if any(address in network for network in self._networks):
            return None
        return _not_public(address)


def _not_public(address: IPAddress) -> str | None:
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is None and address in _NAT64:
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is not None:
            return _not_public(embedded)
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local:
        return "a link-local address (where cloud metadata services live)"
    if address.is_private:
        return "a private address"
    if address.is_multicast or address.is_unspecified or address.is_reserved:
        return "a reserved address"
    if not address.is_global:
        return "not a public address"
    return None


async def _resolve(host: str, port: int) -> list[IPAddress]:
    try:
        return [ipaddress.ip_address(host.strip("[]"))]
    except ValueError:
        pass
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise FetchFailed(f"cannot resolve {host}: {exc.strerror or exc}") from None
    addresses: list[IPAddress] = []
    for *_, sockaddr in infos:
        address = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise FetchFailed(f"cannot resolve {host}")
    return addresses


async def _vetted_address(host: str, port: int, rules: AddressRules, allowed_by: str) -> IPAddress:
    """The address to connect to for ``host``: every address it resolves to must pass
    (a name with one private address among public ones is refused as a whole)."""
    addresses = await _resolve(host, port)
    if rules.host_allowed(host):
        return addresses[0]
    for address in addresses:
        why = rules.address_refusal(address)
        if why is not None:
            shown = host if host.strip("[]") == str(address) else f"{host} ({address})"
            raise FetchRefused(
                f"refused to fetch from {shown}: {why}; an operator can allow it with {allowed_by}"
            )
    return addresses[0]


def _pinned(url: httpx.URL, address: IPAddress) -> httpx.URL:
    host = f"[{address}]" if address.version == 6 else str(address)
    return url.copy_with(host=host)


def _filename(url: str, disposition: str | None) -> str:
    if disposition:
        parser = _HeaderParser()
        parser["content-disposition"] = disposition
        name = parser.get_filename()
        if name:
            return name.replace("/", "_").replace("\\", "_") or "file"
    last = unquote(urlsplit(url).path.rsplit("/", 1)[-1])
    return last.replace("\\", "_") or "file"


def _content_type(header: str | None) -> tuple[str, str | None]:
    if not header:
        return "", None
    parser = _HeaderParser()
    parser["content-type"] = header
    charset = parser.get_content_charset()
    return parser.get_content_type().lower(), charset


def _checked_url(url: str) -> httpx.URL:
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError) as exc:
        raise FetchFailed(f"not a URL: {exc}") from None
    if parsed.scheme not in ("http", "https"):
        raise FetchFailed(f"only http and https URLs can be fetched, not {parsed.scheme!r}")
    if not parsed.host:
        raise FetchFailed("the URL has no host")
    return parsed


async def fetch(
    url: str,
    *,
    allow_hosts: Collection[str] = (),
    max_bytes: int,
    timeout: float = 20.0,
    max_redirects: int = 5,
    headers: Mapping[str, str] | None = None,
    allowed_by: str = "agent.web_fetch.allow_hosts",
) -> Fetched:
    """GET ``url`` within the address rules (see the module docstring).

    Raises ``FetchRefused`` for an address that is not allowed (first hop or any redirect)
    and ``FetchFailed`` for everything else that gives no body: a bad URL, DNS, network or
    TLS errors, an HTTP error status, too many redirects, a body over ``max_bytes``, or no
    answer within ``timeout`` seconds (for the whole fetch, redirects included).

    ``headers`` are sent to the first URL's origin only; ``allowed_by`` names the setting a
    refusal tells the operator to change.
    """
    rules = AddressRules(allow_hosts)
    extra = _Extra(dict(headers or {}), allowed_by)
    try:
        async with asyncio.timeout(timeout):
            return await _fetch(url, rules, max_bytes, max_redirects, extra)
    except TimeoutError:
        raise FetchFailed(f"no answer from {urlsplit(url).hostname} within {timeout:g} s") from None


@dataclass(frozen=True, slots=True)
class _Extra:
    """What a caller adds to a fetch: headers for the first host, the setting to name."""

    headers: dict[str, str]
    allowed_by: str


async def _fetch(
    url: str, rules: AddressRules, max_bytes: int, max_redirects: int, extra: _Extra
) -> Fetched:
    current = _checked_url(url)
    origin = _origin(current)
    # trust_env off: a proxy from the environment would connect on our behalf, unchecked.
    async with httpx.AsyncClient(
        trust_env=False, follow_redirects=False, verify=verified_context()
    ) as client:
        for _ in range(max_redirects + 1):
            host = current.host
            port = current.port or _default_port(current)
            address = await _vetted_address(host, port, rules, extra.allowed_by)
            headers = {
                **(extra.headers if _origin(current) == origin else {}),
                "Host": current.netloc.decode("ascii"),
                "User-Agent": _USER_AGENT,
                "Accept-Encoding": ACCEPT_ENCODING,
            }
            request = client.build_request(
                "GET",
                _pinned(current, address),
                headers=headers,
                extensions={"sni_hostname": host} if current.scheme == "https" else {},
            )
            try:
                response = await client.send(request, stream=True)
            except httpx.HTTPError as exc:
                raise FetchFailed(f"cannot fetch {host}: {_describe(exc)}") from None
            try:
                if response.status_code in _REDIRECTS and "location" in response.headers:
                    location = urljoin(str(current), response.headers["location"])
                    current = _checked_url(location)
                    continue
                if response.status_code >= 400:
                    reason = response.reason_phrase or "error"
                    raise FetchFailed(f"{host} answered {response.status_code} {reason}")
                body = await _read_capped(response, max_bytes, host)
            finally:
                await response.aclose()
            content_type, charset = _content_type(response.headers.get("content-type"))
            return Fetched(
                url=str(current),
                status=response.status_code,
                content_type=content_type,
                charset=charset,
                body=body,
                filename=_filename(str(current), response.headers.get("content-disposition")),
            )
    raise FetchFailed(f"more than {max_redirects} redirects from {urlsplit(url).hostname}")


def _origin(url: httpx.URL) -> tuple[str, str, int]:
    return url.scheme, url.host, url.port or _default_port(url)


def _default_port(url: httpx.URL) -> int:
    return 443 if url.scheme == "https" else 80


async def _read_capped(response: httpx.Response, max_bytes: int, host: str) -> bytes:
    try:
        return await read_capped_body(response, max_bytes)
    except BodyTooLarge:
        raise FetchFailed(f"the file at {host} is larger than {max_bytes:,} bytes") from None
    except BodyUnreadable as exc:
        raise FetchFailed(f"cannot read the file at {host}: {exc}") from None
    except httpx.HTTPError as exc:
        raise FetchFailed(f"cannot fetch {host}: {_describe(exc)}") from None


def _describe(exc: httpx.HTTPError) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
