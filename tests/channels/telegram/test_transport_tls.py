"""The Telegram adapter's own network layer (``transport.py``) over TLS, as the Bot API is
served (the loopback fakes are plain HTTP): a verified server answers requests small and
large, one connection after another and several at once; a certificate that does not name
the host is refused; and a lease at its end writes nothing to the server, also when the sends
go through a proxy (a CONNECT tunnel)."""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
import trustme
from aiohttp import web

from botd.channels.telegram.transport import FencedTransport, fenced_requests, sends_request
from botd.cluster.fencing import Fence, LeaseLost
from botd.cluster.leases import LeaseKeeper, ProcessLeases
from botd.net.tls import verified_context
from tests.fakes.proxies import HttpProxy


@pytest.fixture
def trusted_ca(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[trustme.CA]:
    """A CA that botd's shared TLS context trusts (``SSL_CERT_FILE``) for this test."""
    ca = trustme.CA()
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    monkeypatch.setenv("SSL_CERT_FILE", str(ca_file))
    verified_context.cache_clear()
    yield ca
    verified_context.cache_clear()


@pytest.fixture
async def tls_server(trusted_ca: trustme.CA) -> AsyncIterator[tuple[int, list[int]]]:
    """An HTTPS server for ``localhost``: its port, and the body size of each request."""
    seen: list[int] = []

    async def answer(request: web.Request) -> web.Response:
        body = await request.read()
        seen.append(len(body))
        return web.json_response({"ok": True, "result": len(body)})

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    trusted_ca.issue_cert("localhost").configure_cert(context)
    app = web.Application()
    app.router.add_route("*", "/{path:.*}", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "localhost", 0, ssl_context=context)
    await site.start()
    try:
        yield runner.addresses[0][1], seen
    finally:
        await runner.cleanup()


async def test_requests_over_tls_reach_a_verified_server_whole(
    tls_server: tuple[int, list[int]],
) -> None:
    port, seen = tls_server
    sizes = [10, 70_000, 300_000]  # the larger ones take more than one write
    async with httpx.AsyncClient(transport=FencedTransport(max_connections=4)) as client:
        for size in sizes:
            answer = await client.post(f"https://localhost:{port}/sendMessage", content=b"x" * size)
            assert answer.json() == {"ok": True, "result": size}
        answers = await asyncio.gather(
            *(client.get(f"https://localhost:{port}/getMe") for _ in range(6))
        )
    assert [a.status_code for a in answers] == [200] * 6
    assert seen == [*sizes, *[0] * 6]


async def test_a_certificate_for_another_host_is_refused(
    tls_server: tuple[int, list[int]],
) -> None:
    port, seen = tls_server
    async with httpx.AsyncClient(transport=FencedTransport(max_connections=1)) as client:
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            await client.get(f"https://127.0.0.1:{port}/getMe")  # the certificate names localhost
    assert seen == []


async def test_a_lease_at_its_end_writes_nothing_over_tls(
    tls_server: tuple[int, list[int]],
) -> None:
    port, seen = tls_server
    keeper = LeaseKeeper(ProcessLeases(), "node-a", 60)
    lease = await keeper.try_claim("conversation:telegram:1")
    assert lease is not None
    async with httpx.AsyncClient(transport=FencedTransport(max_connections=1)) as client:
        with fenced_requests(Fence(lease, "node-a", 1.0)):
            await client.post(f"https://localhost:{port}/sendMessage", content=b"held")
            lease.deadline = time.monotonic()  # the node was frozen past the lease's end
            with pytest.raises(LeaseLost):
                await client.post(f"https://localhost:{port}/sendMessage", content=b"late")
    assert seen == [4]
    assert lease.lost.is_set()


async def test_through_a_proxy_the_sends_tunnel_over_tls_and_a_lease_at_its_end_sends_nothing(
    tls_server: tuple[int, list[int]],
) -> None:
    """With ``proxy:`` the sends go through httpx's own transport, over a CONNECT tunnel for
    an https:// Bot API, and the lease is still checked as each request starts."""
    port, seen = tls_server
    keeper = LeaseKeeper(ProcessLeases(), "node-a", 60)
    lease = await keeper.try_claim("conversation:telegram:1")
    assert lease is not None
    base = f"https://localhost:{port}"
    async with HttpProxy(user="botd", password="Zr4kWq9Tn2") as proxy:
        request = sends_request(base, proxy.url)
        await request.initialize()
        try:
            with fenced_requests(Fence(lease, "node-a", 1.0)):
                code, _ = await request.do_request(f"{base}/sendMessage", "POST")
                assert code == 200
                lease.deadline = time.monotonic()  # the node was frozen past the lease's end
                with pytest.raises(LeaseLost):
                    await request.do_request(f"{base}/sendMessage", "POST")
        finally:
            await request.shutdown()
    assert seen == [0]
    assert [(p.kind, p.host, p.port) for p in proxy.passages] == [("CONNECT", "localhost", port)]
