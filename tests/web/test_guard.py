"""The guard in front of every route of the web page (``botd.web.guard``), over botd's real
HTTP server: a Host that is not the bound address is refused (DNS rebinding); with a token,
nothing passes without it (Bearer header or the login's cookie, which holds a digest and is
HttpOnly, SameSite=Strict); a write needs to come from the page; and every response, a
refusal and a stream included, carries the security headers."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import aiohttp
import pytest
from aiohttp import web

from botd.config.schema import WebSection
from botd.http.routes import HttpServers
from botd.web.guard import COOKIE, SECURITY_HEADERS, guarded, login_handler

TOKEN = "web-token-s3cret"


async def hello(request: web.Request) -> web.StreamResponse:
    return web.json_response({"hello": "you"})


async def stream(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    await response.write(b"event: status\ndata: {}\n\n")
    return response


@dataclass
class Served:
    port: int
    section: WebSection

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


Start = Callable[[WebSection], Awaitable[Served]]


@pytest.fixture
async def serve() -> AsyncIterator[Start]:
    http = HttpServers()

    async def start(section: WebSection) -> Served:
        def current() -> WebSection:
            return section

        route = await http.add(
            "GET", "/api/x", guarded(hello, current, writes=False), host="127.0.0.1", port=0
        )
        for method, path, handler in (
            ("POST", "/api/x", guarded(hello, current, writes=True)),
            ("GET", "/api/events", guarded(stream, current, writes=False)),
            ("GET", "/login", login_handler(current)),
            ("POST", "/login", login_handler(current)),
        ):
            await http.add(method, path, handler, host="127.0.0.1", port=0)
        return Served(route.port, section)

    try:
        yield start
    finally:
        await http.close()


async def call(
    method: str, url: str, *, headers: dict[str, str] | None = None, **options: object
) -> tuple[int, str, dict[str, str]]:
    async with (
        aiohttp.ClientSession() as client,
        client.request(method, url, headers=headers, allow_redirects=False, **options) as answer,  # type: ignore[arg-type]
    ):
        return answer.status, await answer.text(), dict(answer.headers)


async def test_loopback_without_token_answers_the_page_and_refuses_other_hosts(
    serve: Start,
) -> None:
    served = await serve(WebSection(enabled=True))
    status, body, headers = await call("GET", served.url("/api/x"))
    assert (status, body) == (200, '{"hello": "you"}')
    for name, value in SECURITY_HEADERS.items():
        assert headers[name] == value
    assert "'unsafe-inline'" not in headers["Content-Security-Policy"]
    localhost = {"Host": f"localhost:{served.port}"}
    assert (await call("GET", served.url("/api/x"), headers=localhost))[0] == 200

    # A page of evil.example whose name now points at 127.0.0.1.
    rebound = {"Host": f"evil.example:{served.port}"}
    status, body, headers = await call("GET", served.url("/api/x"), headers=rebound)
    assert status == 421 and "host name" in body
    assert headers["X-Frame-Options"] == "DENY"  # a refusal carries them too


async def test_a_write_must_come_from_the_page(serve: Start) -> None:
    served = await serve(WebSection(enabled=True))
    url = served.url("/api/x")
    # A cross-site form: no custom header can be sent.
    assert (await call("POST", url, headers={"Origin": "http://evil.example"}))[0] == 403
    assert (await call("POST", url))[0] == 403
    page = {"X-Botd-Console": "1"}
    assert (await call("POST", url, headers=page))[0] == 200
    same = {**page, "Origin": f"http://127.0.0.1:{served.port}", "Sec-Fetch-Site": "same-origin"}
    assert (await call("POST", url, headers=same))[0] == 200
    other = {**page, "Origin": "http://evil.example"}
    assert (await call("POST", url, headers=other))[0] == 403
    cross = {**page, "Sec-Fetch-Site": "cross-site"}
    assert (await call("POST", url, headers=cross))[0] == 403
    # A client with a Bearer header is no browser's ambient credential.
    assert (await call("POST", url, headers={"Authorization": "Bearer x"}))[0] == 200


async def test_with_a_token_nothing_passes_without_it(
    serve: Start,
) -> None:
    served = await serve(WebSection(enabled=True, token=TOKEN))
    url = served.url("/api/x")
    status, body, headers = await call("GET", url)
    assert status == 401 and TOKEN not in body
    assert headers["Cache-Control"] == "no-store"
    status, body, _ = await call("GET", url, headers={"Accept": "text/html"})
    assert status == 401 and 'action="/login"' in body  # a browser gets the login form
    assert (await call("GET", url, headers={"Authorization": "Bearer wrong"}))[0] == 401
    assert (await call("GET", url, headers={"Authorization": f"Bearer {TOKEN}"}))[0] == 200
    status, _, headers = await call("GET", served.url("/api/events"))
    assert status == 401 and headers["X-Content-Type-Options"] == "nosniff"

    # The login: a wrong token shows the form again; the right one sets the cookie.
    status, body, _ = await call("GET", served.url("/login?token=wrong"))
    assert status == 401 and "not the token" in body
    status, _, headers = await call("POST", served.url("/login"), data={"token": TOKEN})
    assert status == 303 and headers["Location"] == "/"
    cookie = headers["Set-Cookie"]
    assert cookie.startswith(f"{COOKIE}=") and TOKEN not in cookie
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    jar = {"Cookie": cookie.split(";")[0]}
    assert (await call("GET", url, headers=jar))[0] == 200
    status, body, headers = await call("GET", served.url("/api/events"), headers=jar)
    assert (status, body) == (200, "event: status\ndata: {}\n\n")
    assert headers["Content-Security-Policy"] == SECURITY_HEADERS["Content-Security-Policy"]
    # The cookie still counts as the page's own: a write needs the page's header.
    assert (await call("POST", url, headers=jar))[0] == 403
    assert (await call("POST", url, headers={**jar, "X-Botd-Console": "1"}))[0] == 200
