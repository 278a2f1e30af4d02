"""The pieces the cluster tests stand on, checked on their own: the round-robin proxy (spreads
requests, answers 502 for a node that is down and 504 for one that does not answer, then passes
it over for a while), and the fakes' cluster behaviour (Telegram cuts off a waiting long poll
when another comes; Slack spreads events over its Socket Mode connections and sends one again
when it is not acknowledged)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
import pytest
from aiohttp import web

from tests.cluster.proxy import RoundRobinProxy
from tests.fakes.loopback import serve
from tests.fakes.slack_api import FakeSlack, event_callback
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.health_probe import free_port
from tests.support.waiting import guarded, until

pytestmark = pytest.mark.no_nodes


@asynccontextmanager
async def upstream(name: str, gate: asyncio.Event | None = None) -> AsyncIterator[str]:
    """A server answering every request with ``name`` (once ``gate`` is set, if given)."""

    async def answer(request: web.Request) -> web.Response:
        if gate is not None:
            await gate.wait()
        return web.Response(text=f"{name} {request.path}")

    app = web.Application()
    app.router.add_route("*", "/{path:.*}", answer)
    runner, port = await serve(app, shutdown_timeout=0.1)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def fetch(session: aiohttp.ClientSession, url: str, body: object = None) -> tuple[int, str]:
    async with session.post(url, json=body) as response:
        return response.status, await response.text()


async def test_the_proxy_spreads_requests_and_passes_over_a_node_that_is_down() -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    async with (
        upstream("a") as a,
        upstream("b") as b,
        RoundRobinProxy([a, dead, b], fail_timeout=600) as proxy,
        aiohttp.ClientSession() as session,
    ):
        answers = [await fetch(session, f"{proxy.url}/hook") for _ in range(5)]
    assert answers == [
        (200, "a /hook"),
        (502, "upstream 1 failed\n"),
        (200, "b /hook"),
        (200, "a /hook"),  # the dead one passed over from now on
        (200, "b /hook"),
    ]
    assert proxy.forwards == [(0, 200), (1, 502), (2, 200), (0, 200), (2, 200)]


async def test_the_proxy_answers_504_for_a_node_that_does_not_answer() -> None:
    gate = asyncio.Event()
    async with (
        upstream("stuck", gate) as stuck,
        RoundRobinProxy([stuck], timeout=0.2) as proxy,
        aiohttp.ClientSession() as session,
    ):
        assert await fetch(session, f"{proxy.url}/hook") == (504, "upstream 0 failed\n")
        gate.set()
        # All upstreams failed lately: the proxy tries one anyway rather than none.
        assert await fetch(session, f"{proxy.url}/hook") == (200, "stuck /hook")


async def test_telegram_cuts_off_a_waiting_long_poll_when_another_comes() -> None:
    async with FakeTelegramAPI() as telegram, aiohttp.ClientSession() as session:
        url = f"{telegram.node_url('n1')}/bot{telegram.token}/getUpdates"
        first = asyncio.create_task(fetch(session, url, {"timeout": 30}))
        await until(lambda: telegram.calls_to("getUpdates"), "the first poll waiting")
        second = asyncio.create_task(fetch(session, url, {"timeout": 30}))
        status, body = await guarded(first, "the first poll cut off")
        assert status == 409
        assert "terminated by other getUpdates request" in json.loads(body)["description"]
        assert telegram.conflicts == 1
        telegram.push_text(777, "hello")
        status, body = await guarded(second, "the second poll answered")
    assert status == 200 and json.loads(body)["result"][0]["message"]["text"] == "hello"
    assert {call.via for call in telegram.calls} == {"n1"}


async def test_slack_sends_an_unacknowledged_event_again_over_another_connection() -> None:
    async with FakeSlack() as slack, aiohttp.ClientSession() as session:
        sockets = []
        for name in ("n1", "n2"):
            async with session.post(f"{slack.node_url(name)}apps.connections.open") as opened:
                url = (await opened.json())["url"]
            sockets.append(await session.ws_connect(url))
            await sockets[-1].receive_json()  # hello
        silent, answering = sockets

        async def acknowledge() -> None:
            envelope = await answering.receive_json()
            await answering.send_json({"envelope_id": envelope["envelope_id"]})

        acker = asyncio.create_task(acknowledge())
        event = event_callback({"type": "message", "text": "hi"}, event_id="Ev1")
        assert await slack.deliver_event(event, ack_timeout=0.2)
        await acker
        first = await silent.receive_json()  # taken, never acknowledged
        for ws in sockets:
            await ws.close()
    assert first["retry_attempt"] == 0
    assert slack.deliveries == [("Ev1", "n1", 0), ("Ev1", "n2", 1)]
