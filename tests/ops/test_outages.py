"""``/healthz`` sees outages, ``botd run`` over the loopback fakes with the real SDKs.

A platform out of reach for longer than ``health.down_after`` (Telegram's polls failing,
Slack's socket reconnecting, Discord's gateway resuming in vain) shows its channel down: 503
naming it and its last error, ``/status`` in another chat saying so, while the other
channels answer; nothing is restarted, and the channel is ``running`` again by itself once the
platform answers. A model API failing every call degrades ``/healthz`` until a call goes
through; so does an inbox whose oldest message waits past ``health.stuck_after``.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.fakes.anthropic_api import FakeAnthropicAPI, http_error, stream, text
from tests.fakes.discord_api import FakeDiscordAPI
from tests.fakes.slack_api import FakeSlack, event_callback
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.daemon_process import (
    HANG_GUARD,
    daemon_env,
    reap,
    run_botd,
    start_daemon,
    stop_daemon,
)
from tests.support.health_probe import free_port, scrape, value
from tests.support.waiting import until

TELEGRAM_TOKEN = "123456:OUTAGE-TOKEN"
DM = 5150


@dataclass
class Running:
    """A ``botd run`` over the fakes, with what a test reads of it."""

    telegram: FakeTelegramAPI
    slack: FakeSlack
    discord: FakeDiscordAPI
    model: FakeAnthropicAPI
    health_port: int
    log_path: Path
    http: aiohttp.ClientSession

    async def healthz(self) -> tuple[int, dict[str, Any]]:
        url = f"http://127.0.0.1:{self.health_port}/healthz"
        try:
            async with self.http.get(url) as response:
                return response.status, await response.json()
        except aiohttp.ClientConnectionError:
            return 0, {}  # not listening yet

    async def until_health(
        self, what: str, check: Callable[[int, dict[str, Any]], bool], guard: float = HANG_GUARD
    ) -> Any:
        """Poll ``/healthz`` until ``check(status, body)``; the body then."""
        seen: dict[str, Any] = {}

        async def holds() -> bool:
            status, body = await self.healthz()
            seen.update(status=status, body=body)
            return status != 0 and check(status, body)

        await until(holds, what, guard)
        return seen["body"]

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    # -- chatting ---------------------------------------------------------------------------

    async def ask(self, channel: str, question: str) -> str:
        """Send ``question`` in a DM on ``channel``; the first new answer's text."""
        if channel == "telegram":
            before = len(self.telegram.calls_to("sendMessage", ok_only=True))
            self.telegram.push_text(DM, question)

            def telegram_answers() -> list[str]:
                calls = self.telegram.calls_to("sendMessage", ok_only=True)[before:]
                return [str(c.params["text"]) for c in calls]

            await until(telegram_answers, f"an answer on telegram to {question}")
            return telegram_answers()[0]
        before = len(self.slack.calls_to("chat.postMessage"))
        self._slack_ts += 1
        event = {"type": "message", "channel": "D1", "channel_type": "im", "user": "U1"}
        ts = f"{self._slack_ts}.000001"
        await self.slack.send_event(event_callback({**event, "text": question, "ts": ts}))

        def slack_answers() -> list[str]:
            return [str(c.args.get("text")) for c in self.slack.calls_to("chat.postMessage")][
                before:
            ]

        await until(slack_answers, f"an answer on slack to {question}")
        return slack_answers()[0]

    _slack_ts = 100


def _config(path: Path, running: Running, *, down_after: float, stuck_after: float) -> None:
    telegram, slack, discord, model = (
        running.telegram,
        running.slack,
        running.discord,
        running.model,
    )
    path.write_text(
        f"""
state_dir: {json.dumps(str(path.parent / "state"))}
health:
  port: {running.health_port}
  down_after: {down_after}
  stuck_after: {stuck_after}
model:
  provider: anthropic
  name: claude-test
  api_key: sk-test-key
  base_url: {json.dumps(model.base_url)}
  max_retry_wait: 0.05
channels:
  telegram:
    token: "${{T_TOKEN}}"
    api_base_url: {json.dumps(telegram.base_url)}
    poll_timeout: 1
    dm_policy: open
    command_menu: false
  slack:
    bot_token: xoxb-test
    app_token: xapp-test
    api_base_url: {json.dumps(slack.base_url)}
    dm_policy: open
  discord:
    token: discord-test-token
    api_base_url: {json.dumps(discord.base_url)}
    gateway_url: {json.dumps(discord.gateway_url)}
    guild_ready_timeout: 0.05
    dm_policy: open
    command_menu: false
""",
        encoding="utf-8",
    )


@asynccontextmanager
async def botd_over_fakes(
    tmp_path: Path, *, down_after: float = 1, stuck_after: float = 600
) -> AsyncIterator[Running]:
    """The three platforms' fakes, the model's, and ``botd run`` over them, every channel
    running and ``/healthz`` 200 before the block; stopped (exit 0) after it."""
    async with AsyncExitStack() as stack:
        running = Running(
            telegram=await stack.enter_async_context(FakeTelegramAPI(TELEGRAM_TOKEN)),
            slack=await stack.enter_async_context(FakeSlack()),
            discord=await stack.enter_async_context(FakeDiscordAPI()),
            model=await stack.enter_async_context(FakeAnthropicAPI()),
            health_port=free_port(),
            log_path=tmp_path / "daemon.log",
            http=await stack.enter_async_context(aiohttp.ClientSession()),
        )
        running.model.responder = lambda body: stream(text("an answer"))
        config = tmp_path / "botd.yaml"
        _config(config, running, down_after=down_after, stuck_after=stuck_after)
        process = await start_daemon(
            config, tmp_path, log_path=running.log_path, T_TOKEN=TELEGRAM_TOKEN
        )
        try:
            await running.until_health("every channel running", lambda status, _: status == 200)
            yield running
            assert await stop_daemon(process) == 0
        finally:
            await reap(process)


# What each platform's last error may say once its server is gone: a Telegram long poll in
# flight when the server went away ends in a ReadError, the polls after it cannot connect.
LAST_ERROR = {
    "telegram": ("getUpdates failed: httpx.ConnectError", "getUpdates failed: httpx.ReadError"),
    "slack": ("Socket Mode reconnecting:",),
    "discord": ("cannot reach the gateway: ClientConnectorError",),
}


@pytest.mark.parametrize("name", ["telegram", "slack", "discord"])
async def test_a_platform_out_of_reach_is_down_while_the_others_answer_and_comes_back(
    tmp_path: Path, name: str
) -> None:
    other = "slack" if name == "telegram" else "telegram"
    async with botd_over_fakes(tmp_path) as botd:
        fakes: dict[str, FakeTelegramAPI | FakeSlack | FakeDiscordAPI] = {
            "telegram": botd.telegram,
            "slack": botd.slack,
            "discord": botd.discord,
        }
        outage = await fakes[name].outage()  # new connections refused, open ones dropped

        def down(status: int, body: dict[str, Any]) -> bool:
            return status == 503 and body["channels"][name] == "down"

        body = await botd.until_health(f"{name} down", down)
        assert {n: s for n, s in body["channels"].items() if n != name} == {
            n: "running" for n in ("telegram", "slack", "discord") if n != name
        }
        [problem] = body["problems"]
        assert problem.startswith(f"channel {name}: down for ") and "\n" not in problem
        assert any(error in problem for error in LAST_ERROR[name]), problem

        # Each failed try of the SDK to reach its platform is counted as it happens.
        samples, _ = await scrape(botd.health_port)
        tries = value(samples, "botd_errors_total", channel=name, kind="unreachable")
        assert tries is not None and tries >= 1, tries
        assert value(samples, "botd_channel_up", channel=name) == 0
        assert value(samples, "botd_errors_total", channel=name, kind="channel_down") is None

        # The other channels answer meanwhile, and /status there names the one down.
        assert await botd.ask(other, "still there?") == "an answer"
        status = await botd.ask(other, "/status")
        assert f"Channel {name} is down: unreachable for " in status, status
        assert any(error in status for error in LAST_ERROR[name]), status

        await outage.end()
        # The SDK reconnects on its own schedule (discord.py's waits double at random), so the
        # guard is wider here; the wait itself ends as soon as the platform is back.
        body = await botd.until_health(
            f"{name} back", lambda status, _: status == 200, guard=2 * HANG_GUARD
        )
        assert body["channels"] == {n: "running" for n in ("telegram", "slack", "discord")}
        assert body["problems"] == []
    log = botd.log()
    assert f"channel {name}: down for " in log  # the WARNING once it counted
    assert f"channel {name} is back after " in log
    assert f"channel {name} down:" not in log  # the keeper's restart line: nothing restarted


async def test_a_model_api_failing_every_call_degrades_until_a_call_goes_through(
    tmp_path: Path,
) -> None:
    async with botd_over_fakes(tmp_path) as botd:
        botd.model.responder = lambda body: http_error(529, "overloaded_error", "Overloaded")
        failed = await botd.ask("telegram", "anyone home?")
        assert failed != "an answer"  # the user is told the model failed

        def degraded(status: int, body: dict[str, Any]) -> bool:
            return status == 503 and bool(body["problems"])

        body = await botd.until_health("the model degraded", degraded)
        component = body["components"]["model:anthropic/claude-test"]
        assert component["status"] == "degraded"
        assert component["reason"].startswith("the last call failed, over ")
        assert "HTTP 529, overloaded_error" in component["reason"]
        [problem] = body["problems"]
        assert problem.startswith("model:anthropic/claude-test: the last call failed")
        assert set(body["channels"].values()) == {"running"}

        botd.model.responder = lambda body: stream(text("an answer"))
        assert await botd.ask("telegram", "and now?") == "an answer"
        body = await botd.until_health("the model well", lambda status, _: status == 200)
        assert body["components"]["model:anthropic/claude-test"] == {"status": "ok"}
    log = botd.log()
    assert "model:anthropic/claude-test: the last call failed, over " in log
    assert "model:anthropic/claude-test is back after " in log


async def test_a_refused_request_does_not_degrade_the_model(tmp_path: Path) -> None:
    async with botd_over_fakes(tmp_path, down_after=0) as botd:
        botd.model.responder = lambda body: http_error(400, "invalid_request_error", "too long")
        await botd.ask("telegram", "a request the API refuses")
        status, _ = await botd.healthz()  # down_after 0: a failure that counted would show now
        assert status == 200
        botd.model.responder = lambda body: http_error(529, "overloaded_error", "Overloaded")
        await botd.ask("telegram", "an overloaded one")
        # down_after 0: one failed call counts at once; the refusal before it never did.
        body = await botd.until_health("the model degraded", lambda status, _: status == 503)
        reason = body["components"]["model:anthropic/claude-test"]["reason"]
        assert reason.startswith("the last call failed"), reason


async def test_a_stuck_inbox_degrades_health_naming_its_age(tmp_path: Path) -> None:
    async with botd_over_fakes(tmp_path, stuck_after=1) as botd:
        release = botd.model.hold()  # the model takes its time
        before = len(botd.telegram.calls_to("sendMessage", ok_only=True))
        botd.telegram.push_text(DM, "a long question")

        def stuck(status: int, body: dict[str, Any]) -> bool:
            return status == 503 and body["components"]["inbox"]["status"] == "degraded"

        body = await botd.until_health("the inbox stuck", stuck)
        [problem] = body["problems"]
        assert problem.startswith("inbox: the oldest unanswered message was accepted "), problem
        assert " s ago (1 unanswered; health.stuck_after is 1 s)" in problem
        assert set(body["channels"].values()) == {"running"}

        release.set()
        await until(
            lambda: len(botd.telegram.calls_to("sendMessage", ok_only=True)) > before,
            "the answer",
        )
        body = await botd.until_health("the inbox well", lambda status, _: status == 200)
        assert body["components"]["inbox"] == {"status": "ok"}


async def test_health_is_on_by_default_and_a_port_in_use_stops_botd_run_in_one_line(
    tmp_path: Path,
) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        async with FakeTelegramAPI(TELEGRAM_TOKEN) as telegram:
            config = tmp_path / "botd.yaml"
            config.write_text(
                f"state_dir: {json.dumps(str(tmp_path / 'state'))}\n"
                f"health: {{port: {port}}}\n"
                "model: {provider: scripted}\n"
                "channels:\n"
                f"  telegram: {{token: '${{T_TOKEN}}', api_base_url: '{telegram.base_url}'}}\n",
                encoding="utf-8",
            )
            env = daemon_env(T_TOKEN=TELEGRAM_TOKEN)
            result = await asyncio.to_thread(run_botd, "run", "--config", str(config), env=env)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"botd: health.port: cannot listen on 127.0.0.1:{port}: Address already in use; stop "
        "what listens there, choose another health.port, or set health.enabled: false"
    ]
    assert "Traceback" not in result.stderr
