"""botd's HTTP servers: routes added and removed while a server runs, one server per address
(shared by the parts that name the same one), a removed route's requests answered first,
and in a running botd the Telegram webhook and ``/healthz`` on one port or on two."""

from __future__ import annotations

import asyncio
import errno
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from botd.http.routes import CannotListen, HttpServers
from botd.ops.ports import listen_problem
from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.daemon_inprocess import (
    anthropic_yaml,
    config_yaml,
    daemon_running,
    telegram_yaml,
)
from tests.support.health_probe import free_port
from tests.support.waiting import until

HOST = "127.0.0.1"
SECRET = "hook-secret"
DM = 4242


@pytest.fixture
async def http() -> AsyncIterator[HttpServers]:
    servers = HttpServers()
    try:
        yield servers
    finally:
        await servers.close()


def saying(words: str) -> web.Response:
    return web.Response(text=words)


async def hello(request: web.Request) -> web.Response:
    return saying("hello")


async def other(request: web.Request) -> web.Response:
    return saying("other")


async def fetch(method: str, port: int, path: str) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as client,
        client.request(method, f"http://{HOST}:{port}{path}") as response,
    ):
        return response.status, await response.text()


async def test_routes_come_and_go_while_the_server_runs(http: HttpServers) -> None:
    hello_route = await http.add("GET", "/hello", hello, host=HOST, port=0)
    port = hello_route.port
    assert await fetch("GET", port, "/hello") == (200, "hello")
    assert (await fetch("HEAD", port, "/hello"))[0] == 200  # a GET route answers HEAD
    assert (await fetch("POST", port, "/hello"))[0] == 405
    assert (await fetch("GET", port, "/nobody"))[0] == 404

    # Added at the same address later: the running server serves it at once.
    other_route = await http.add("POST", "/other", other, host=HOST, port=0)
    assert other_route.port == port and http.listening() == [(HOST, port)]
    assert await fetch("POST", port, "/other") == (200, "other")

    await hello_route.remove()
    assert (await fetch("GET", port, "/hello"))[0] == 404
    assert await fetch("POST", port, "/other") == (200, "other")
    await hello_route.remove()  # twice is harmless

    # The last route gone, the server stops and the port is free again.
    await other_route.remove()
    assert http.listening() == []
    assert listen_problem(HOST, port) is None


async def test_each_address_has_its_own_server(http: HttpServers) -> None:
    first, second = free_port(), free_port()
    await http.add("GET", "/hello", hello, host=HOST, port=first)
    await http.add("GET", "/hello", other, host=HOST, port=second)
    assert sorted(http.listening()) == sorted([(HOST, first), (HOST, second)])
    assert await fetch("GET", first, "/hello") == (200, "hello")
    assert await fetch("GET", second, "/hello") == (200, "other")
    await http.close()
    assert http.listening() == []
    assert listen_problem(HOST, first) is None and listen_problem(HOST, second) is None


async def test_a_path_served_already_or_a_port_taken_is_refused(http: HttpServers) -> None:
    route = await http.add("GET", "/hello", hello, host=HOST, port=free_port())
    with pytest.raises(CannotListen) as taken:
        await http.add("GET", "/hello", other, host=HOST, port=route.port)
    assert taken.value.errno == errno.EADDRINUSE
    assert taken.value.strerror == "GET /hello is served there already"
    assert taken.value.where == f"{HOST}:{route.port}"
    assert await fetch("GET", route.port, "/hello") == (200, "hello")  # the first one stays

    with socket.socket() as holder:
        holder.bind((HOST, 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(CannotListen) as refused:
            await http.add("GET", "/hello", hello, host=HOST, port=port)
    assert refused.value.strerror == "Address already in use"
    assert refused.value.where == f"{HOST}:{port}"
    assert http.listening() == [(HOST, route.port)]


async def test_a_removed_route_answers_the_request_in_hand_first(http: HttpServers) -> None:
    arrived, go_on = asyncio.Event(), asyncio.Event()

    async def slow(request: web.Request) -> web.Response:
        arrived.set()
        await go_on.wait()
        return saying("finished")

    route = await http.add("POST", "/slow", slow, host=HOST, port=0)
    asking = asyncio.create_task(fetch("POST", route.port, "/slow"))
    await arrived.wait()
    removing = asyncio.create_task(route.remove())

    async def refused_now() -> bool:
        return (await fetch("POST", route.port, "/slow"))[0] == 404

    # Refused to new requests at once, while the server stays for the one in hand...
    await until(refused_now, "new requests refused")
    assert not asking.done() and not removing.done()
    go_on.set()
    # ...and the request in hand is answered before the removal ends.
    assert await asking == (200, "finished")
    await removing
    assert http.listening() == []


# --------------------------------------------------------------------------- in a running botd


async def test_the_webhook_and_healthz_share_the_health_port(tmp_path: Path) -> None:
    port = free_port()
    async with (
        FakeTelegramAPI() as telegram,
        FakeAnthropicAPI(api_key="sk-ant-test") as model,
    ):
        telegram.webhook_forward = f"http://{HOST}:{port}/telegram"
        config = config_yaml(
            tmp_path,
            f"health: {{enabled: true, host: {HOST}, port: {port}}}\n",
            anthropic_yaml(model),
            telegram_yaml(
                telegram,
                "dm_policy: open",
                "command_menu: false",
                "mode: webhook",
                "webhook_url: https://bot.example.org/telegram",
                f"webhook_secret: {SECRET}",
                f"listen: {{host: {HOST}, port: {port}, path: /telegram}}",
            ),
        )
        async with daemon_running(config) as daemon:
            assert daemon.runtime is not None
            assert daemon.runtime.http.listening() == [(HOST, port)]  # one server for both
            model.push(stream(text("Hi by webhook.")))
            telegram.push_text(DM, "hello")
            await telegram.wait_for_call("sendMessage", 1, ok_only=True)
            assert telegram.webhook_posts == [(1, 200)]
            status, body = await fetch("GET", port, "/healthz")
            assert status == 200 and '"telegram": "running"' in body


async def test_the_webhook_on_its_own_port_has_its_own_server(tmp_path: Path) -> None:
    health, hook = free_port(), free_port()
    async with (
        FakeTelegramAPI() as telegram,
        FakeAnthropicAPI(api_key="sk-ant-test") as model,
    ):
        telegram.webhook_forward = f"http://{HOST}:{hook}/telegram"
        config = config_yaml(
            tmp_path,
            f"health: {{enabled: true, host: {HOST}, port: {health}}}\n",
            anthropic_yaml(model),
            telegram_yaml(
                telegram,
                "dm_policy: open",
                "command_menu: false",
                "mode: webhook",
                "webhook_url: https://bot.example.org/telegram",
                f"webhook_secret: {SECRET}",
                f"listen: {{host: {HOST}, port: {hook}, path: /telegram}}",
            ),
        )
        async with daemon_running(config) as daemon:
            assert daemon.runtime is not None
            assert sorted(daemon.runtime.http.listening()) == sorted([(HOST, health), (HOST, hook)])
            model.push(stream(text("Hi.")))
            telegram.push_text(DM, "hello")
            await telegram.wait_for_call("sendMessage", 1, ok_only=True)
            assert (await fetch("GET", hook, "/healthz"))[0] == 404  # each serves its own
            assert (await fetch("GET", health, "/healthz"))[0] == 200
