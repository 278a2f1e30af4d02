"""The address guard in front of every URL botd fetches for a chat: non-public addresses are
refused (before connecting, after DNS, and on every redirect) unless allowed; bodies are
capped; every failure is one readable line."""

from __future__ import annotations

import asyncio
import gzip
import ipaddress
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from botd.net.fetch import AddressRules, FetchFailed, FetchRefused, fetch
from tests.fakes.loopback import serve

LOOPBACK = ["127.0.0.1"]


class Site:
    """A loopback web server with a few pages, recording the Host header of each request
    (and its ``X-Key`` header, None when it had none)."""

    def __init__(self) -> None:
        self.hosts: list[str] = []
        self.keys: list[str | None] = []
        self.elsewhere = ""
        """Where ``/to-elsewhere`` redirects."""
        self.runner: web.AppRunner | None = None
        self.port = 0
        self.release = asyncio.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _page(self, request: web.Request) -> web.StreamResponse:
        self.hosts.append(request.headers.get("Host", ""))
        self.keys.append(request.headers.get("X-Key"))
        name = request.match_info["name"]
        if name == "hello":
            return web.Response(text="<p>hi</p>", content_type="text/html", charset="latin-1")
        if name == "file":
            return web.Response(
                body=b"\x89PNG....",
                content_type="image/png",
                headers={"Content-Disposition": 'attachment; filename="chart.png"'},
            )
        if name == "to-hello":
            raise web.HTTPFound("/hello")
        if name == "to-elsewhere":
            raise web.HTTPFound(self.elsewhere)
        if name == "to-other-loopback":
            raise web.HTTPFound(f"http://127.0.0.2:{self.port}/hello")
        if name == "to-metadata":
            raise web.HTTPFound("http://169.254.169.254/latest/meta-data/")
        if name == "loop":
            raise web.HTTPFound("/loop")
        if name == "big":
            return web.Response(body=b"x" * 5000, content_type="text/plain")
        if name == "big-chunked":
            response = web.StreamResponse()
            response.content_type = "text/plain"
            await response.prepare(request)
            for _ in range(50):
                await response.write(b"y" * 100)
            await response.write_eof()
            return response
        if name == "bomb":
            packed = gzip.compress(b"z" * 1_000_000)
            return web.Response(
                body=packed, content_type="text/plain", headers={"Content-Encoding": "gzip"}
            )
        if name == "slow":
            await self.release.wait()
        if name == "gone":
            raise web.HTTPNotFound()
        return web.Response(status=500)

    async def __aenter__(self) -> Site:
        app = web.Application()
        app.router.add_get("/{name}", self._page)
        self.runner, self.port = await serve(app)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.runner is not None
        self.release.set()
        await self.runner.cleanup()


@pytest.fixture
async def site() -> AsyncIterator[Site]:
    async with Site() as running:
        yield running


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://127.0.0.1:1/x", "loopback"),
        ("http://localhost:1/x", "loopback"),  # refused for what the name resolves to
        ("http://2130706433:1/x", "loopback"),  # 127.0.0.1 written as one number
        ("http://[::1]:1/x", "loopback"),
        ("http://[::ffff:127.0.0.1]:1/x", "loopback"),
        ("http://169.254.169.254/latest/meta-data/", "link-local"),
        ("http://10.1.2.3/", "private"),
        ("http://192.168.0.1/", "private"),
        ("http://[fd00:ec2::254]/", "private"),
        ("http://0.0.0.0:1/", "address"),
    ],
)
async def test_non_public_addresses_are_refused_by_default(url: str, why: str) -> None:
    with pytest.raises(FetchRefused) as refused:
        await fetch(url, max_bytes=1000, timeout=5)
    message = str(refused.value)
    assert why in message
    assert "agent.web_fetch.allow_hosts" in message
    assert "\n" not in message


async def test_an_allowed_network_is_fetched_with_the_host_header_kept(site: Site) -> None:
    page = await fetch(f"{site.url}/hello", allow_hosts=LOOPBACK, max_bytes=1000)
    assert page.body == b"<p>hi</p>"
    assert (page.status, page.content_type, page.charset) == (200, "text/html", "latin-1")
    assert page.filename == "hello"
    assert site.hosts == [f"127.0.0.1:{site.port}"]


async def test_a_host_allowed_by_name_is_fetched(site: Site) -> None:
    page = await fetch(
        f"http://localhost:{site.port}/hello", allow_hosts=["LocalHost"], max_bytes=99
    )
    assert page.body == b"<p>hi</p>"
    # The connection went to the address the check saw; the name stayed in the Host header.
    assert site.hosts == [f"localhost:{site.port}"]


async def test_the_file_name_comes_from_content_disposition(site: Site) -> None:
    page = await fetch(f"{site.url}/file", allow_hosts=LOOPBACK, max_bytes=1000)
    assert (page.filename, page.content_type) == ("chart.png", "image/png")


async def test_redirects_are_followed_and_each_hop_is_checked(site: Site) -> None:
    page = await fetch(f"{site.url}/to-hello", allow_hosts=["127.0.0.1/32"], max_bytes=1000)
    assert page.url == f"{site.url}/hello"
    assert page.body == b"<p>hi</p>"
    for hop in ("to-other-loopback", "to-metadata"):
        with pytest.raises(FetchRefused):
            await fetch(f"{site.url}/{hop}", allow_hosts=["127.0.0.1/32"], max_bytes=1000)
    with pytest.raises(FetchFailed, match="more than 5 redirects"):
        await fetch(f"{site.url}/loop", allow_hosts=LOOPBACK, max_bytes=1000)


async def test_a_caller_s_headers_go_to_the_first_origin_only(site: Site) -> None:
    key = {"X-Key": "secret"}
    await fetch(f"{site.url}/to-hello", allow_hosts=LOOPBACK, max_bytes=1000, headers=key)
    assert site.keys == ["secret", "secret"]  # a redirect on the same origin keeps them
    async with Site() as other:  # another port: another origin
        site.elsewhere = f"{other.url}/hello"
        page = await fetch(
            f"{site.url}/to-elsewhere", allow_hosts=LOOPBACK, max_bytes=1000, headers=key
        )
        assert page.url == f"{other.url}/hello"
        assert site.keys[-1] == "secret" and other.keys == [None]
    with pytest.raises(FetchRefused, match=r"can allow it with agent\.web_search\.allow_private$"):
        await fetch(
            f"{site.url}/hello", max_bytes=1000, allowed_by="agent.web_search.allow_private"
        )


@pytest.mark.parametrize("name", ["big", "big-chunked", "bomb"])
async def test_a_body_over_the_cap_is_given_up(site: Site, name: str) -> None:
    with pytest.raises(FetchFailed, match="larger than 4,000 bytes"):
        await fetch(f"{site.url}/{name}", allow_hosts=LOOPBACK, max_bytes=4000)


async def test_failures_are_one_line(site: Site) -> None:
    with pytest.raises(FetchFailed, match=r"^127\.0\.0\.1 answered 404 Not Found$"):
        await fetch(f"{site.url}/gone", allow_hosts=LOOPBACK, max_bytes=100)
    with pytest.raises(FetchFailed, match=r"within 0\.3 s"):
        await fetch(f"{site.url}/slow", allow_hosts=LOOPBACK, max_bytes=100, timeout=0.3)
    with pytest.raises(FetchFailed, match="only http and https"):
        await fetch("file:///etc/passwd", max_bytes=100)
    with pytest.raises(FetchFailed, match="cannot resolve"):
        await fetch("http://no-such-host.invalid/", max_bytes=100)
    with pytest.raises(FetchFailed, match="cannot fetch"):
        # Allowed, but nothing listens there.
        await fetch("http://127.0.0.1:1/", allow_hosts=LOOPBACK, max_bytes=100)


def test_public_and_shared_addresses() -> None:
    rules = AddressRules()
    assert rules.address_refusal(ipaddress.ip_address("93.184.216.34")) is None
    assert rules.address_refusal(ipaddress.ip_address("2606:4700::1111")) is None
    assert rules.address_refusal(ipaddress.ip_address("100.64.0.1")) is not None  # carrier NAT
    assert rules.address_refusal(ipaddress.ip_address("64:ff9b::7f00:1")) is not None  # NAT64
    assert rules.address_refusal(ipaddress.ip_address("2002:7f00:1::")) is not None  # 6to4
    allowed = AddressRules(["10.0.0.0/8", "*.corp.example"])
    assert allowed.address_refusal(ipaddress.ip_address("10.9.8.7")) is None
    assert allowed.host_allowed("wiki.corp.example")
    assert not allowed.host_allowed("corp.example.evil")
