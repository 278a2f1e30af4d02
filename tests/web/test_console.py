"""The web page's API over a whole botd in-process (no browser): with health on and the page
off nothing of the page is served; bound off loopback with a token, nothing answers without
it; and no response of a session holds a configured token or key. ``botd check`` refuses a
bind off loopback without a token."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import pytest

from botd.config import ConfigError, parse_config
from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.chat import DM, chatting
from tests.support.daemon_inprocess import ANTHROPIC_KEY, config_yaml, daemon_running
from tests.support.health_probe import free_port

WEB_TOKEN = "web-token-9f8e7d"


def test_a_bind_off_loopback_without_a_token_is_refused() -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config("web:\n  enabled: true\n  host: 0.0.0.0\n", {})
    [problem] = refused.value.problems
    assert problem.line == 1 and "web.host 0.0.0.0 is not loopback: set web.token" in str(
        problem.message
    )
    for host in ("127.0.0.1", "::1", "localhost"):
        assert parse_config(f"web:\n  enabled: true\n  host: {host!r}\n", {}).web.host == host
    config = parse_config("web: {enabled: true, host: 0.0.0.0, token: t0k3n-x}\n", {})
    assert config.web.token == "t0k3n-x"


async def test_with_health_on_and_the_page_off_nothing_of_the_page_is_served(
    tmp_path: Path,
) -> None:
    port = free_port()
    config = config_yaml(tmp_path, f"health:\n  enabled: true\n  port: {port}\n")
    async with daemon_running(config) as daemon, aiohttp.ClientSession() as client:
        assert daemon.web is None
        for path in ("/", "/console.js", "/api/status", "/api/events", "/login"):
            async with client.get(f"http://127.0.0.1:{port}{path}") as answer:
                assert answer.status == 404, path
        async with client.get(f"http://127.0.0.1:{port}/healthz") as answer:
            assert answer.status == 200


async def test_off_loopback_the_token_is_needed_and_no_response_holds_a_secret(
    tmp_path: Path,
) -> None:
    port = free_port()
    web = f"web:\n  enabled: true\n  host: 0.0.0.0\n  port: {port}\n  token: {WEB_TOKEN}\n"
    async with (
        FakeTelegramAPI() as telegram,
        FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as model,
        chatting(tmp_path, telegram, model=model, sections=[web]) as chat,
        aiohttp.ClientSession() as client,
    ):
        model.responder = lambda body: stream(text("Hello."))
        await chat.send("hi")
        assert await chat.reply() == "Hello."
        base = f"http://127.0.0.1:{port}"
        async with client.get(f"{base}/api/status") as answer:
            assert answer.status == 401
        async with client.get(f"{base}/") as answer:
            assert answer.status == 401

        secrets = (WEB_TOKEN, telegram.token, ANTHROPIC_KEY)
        bodies: dict[str, str] = {}
        bearer = {"Authorization": f"Bearer {WEB_TOKEN}"}
        for path in (
            "/",
            "/console.js",
            "/console.css",
            "/api/status",
            "/api/about",
            "/api/conversations",
            f"/api/conversations?key=telegram:{DM}",
            "/api/approvals",
            "/login",
            f"/login?token={WEB_TOKEN}",
            "/login?token=wrong",
        ):
            async with client.get(base + path, headers=bearer, allow_redirects=False) as answer:
                assert answer.status in (200, 303, 401), path
                bodies[path] = await answer.text() + json.dumps(dict(answer.headers))
        async with client.post(
            f"{base}/api/approvals/decide", headers=bearer, json={"token": "x", "verb": "approve"}
        ) as answer:
            assert answer.status == 409
            bodies["decide"] = await answer.text()
        async with client.get(f"{base}/api/events", headers=bearer) as answer:
            # The first events: the status, the conversations and the approvals.
            events = ""
            async with asyncio.timeout(30):
                while events.count("\n\n") < 3:
                    events += (await answer.content.readany()).decode()
            bodies["events"] = events
        assert "event: status" in bodies["events"]
        assert f"telegram:{DM}" in bodies["/api/conversations"]
        assert "Hello." in bodies[f"/api/conversations?key=telegram:{DM}"]
        for path, body in bodies.items():
            for secret in secrets:
                assert secret not in body, f"{path} holds a secret"
