"""``botd run`` with one channel out of reach: the others work, the one is down and comes up by
itself; only a config error or an unusable state directory stops botd (exit 2)."""

from __future__ import annotations

import asyncio
import json
import signal
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text
from tests.fakes.slack_api import FakeSlack, event_callback
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.daemon_process import (
    HANG_GUARD,
    reap,
    run_botd,
    start_daemon,
    stop_daemon,
)
from tests.support.health_probe import free_port
from tests.support.waiting import until

TOKEN = "123456:TEST-TOKEN"


def _healthz(port: int) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _config(tmp_path: Path, *, slack_url: str, telegram_port: int, model_url: str) -> Path:
    path = tmp_path / "botd.yaml"
    path.write_text(
        f"""
state_dir: {json.dumps(str(tmp_path / "state"))}
health: {{enabled: true, port: {free_port()}}}
model:
  provider: anthropic
  name: claude-test
  api_key: sk-test-key
  base_url: {json.dumps(model_url)}
channels:
  slack:
    bot_token: xoxb-test
    app_token: xapp-test
    api_base_url: {json.dumps(slack_url)}
    dm_policy: open
  telegram:
    token: ${{T_TOKEN}}
    api_base_url: "http://127.0.0.1:{telegram_port}/bot"
    dm_policy: open
""",
        encoding="utf-8",
    )
    return path


def _health_port(config: Path) -> int:
    for line in config.read_text(encoding="utf-8").splitlines():
        if line.startswith("health:"):
            return int(line.split("port:")[1].strip(" }"))
    raise AssertionError("no health port")


async def test_a_channel_out_of_reach_is_down_while_the_other_answers_then_comes_up(
    tmp_path: Path,
) -> None:
    telegram_port = free_port()  # nobody listens there yet
    log_path = tmp_path / "daemon.log"
    loop = asyncio.get_running_loop()
    async with FakeSlack() as slack, FakeAnthropicAPI() as model:
        config = _config(
            tmp_path,
            slack_url=slack.base_url,
            telegram_port=telegram_port,
            model_url=model.base_url,
        )
        port = _health_port(config)
        process = await start_daemon(config, tmp_path, log_path=log_path, T_TOKEN=TOKEN)
        try:

            async def degraded() -> bool:
                if "channel telegram down" not in log_path.read_text(errors="replace"):
                    return False
                try:
                    status, _ = await loop.run_in_executor(None, _healthz, port)
                except OSError:
                    return False  # the health endpoint is not up yet
                return status == 503

            await until(degraded, "telegram down")
            status, body = await loop.run_in_executor(None, _healthz, port)
            assert status == 503
            assert body["channels"] == {"slack": "running", "telegram": "down"}
            [problem] = body["problems"]
            assert problem.startswith("channel telegram: down (") and "\n" not in problem

            # Slack works meanwhile: a question is answered, /status names the down channel.
            model.push(stream(text("Hi from the model")))
            event = {"type": "message", "channel": "D1", "channel_type": "im", "user": "U1"}
            await slack.send_event(event_callback({**event, "text": "hello", "ts": "1.000001"}))
            await slack.send_event(event_callback({**event, "text": "/status", "ts": "1.000002"}))

            def posted() -> list[str]:
                return [str(c.args.get("text")) for c in slack.calls_to("chat.postMessage")]

            async def both_answered() -> bool:
                return len(posted()) >= 2

            await until(both_answered, "two answers")
            assert "Hi from the model" in posted()
            [status_text] = [t for t in posted() if "Channel telegram is down:" in t]
            assert "slack" not in status_text.split("Channel telegram")[1]

            # Telegram comes up on that port: the channel is retried into running.
            async with FakeTelegramAPI(TOKEN, port=telegram_port) as telegram:

                async def healthy() -> bool:
                    status, _ = await loop.run_in_executor(None, _healthz, port)
                    return status == 200

                await until(healthy, "telegram up")
                assert telegram.calls_to("getMe")
                status, body = await loop.run_in_executor(None, _healthz, port)
                assert body["channels"] == {"slack": "running", "telegram": "running"}
                assert await stop_daemon(process) == 0
        finally:
            await reap(process)
    log = log_path.read_text(encoding="utf-8")
    assert "Traceback" not in log
    down = [line for line in log.splitlines() if "channel telegram down:" in line]
    assert down  # one line per failed attempt, the reason on the same line
    assert all("retry" in line for line in down)
    assert "channel telegram is up again" in log


async def test_a_reload_fixing_a_down_channel_s_url_brings_it_up(tmp_path: Path) -> None:
    log_path = tmp_path / "daemon.log"
    loop = asyncio.get_running_loop()
    async with FakeTelegramAPI(TOKEN) as telegram, FakeAnthropicAPI() as model:
        config = tmp_path / "botd.yaml"
        port = free_port()

        def write(url: str) -> None:
            config.write_text(
                f"""
state_dir: {json.dumps(str(tmp_path / "state"))}
health: {{enabled: true, port: {port}}}
model: {{provider: anthropic, name: claude-test, api_key: sk-test-key,
         base_url: {json.dumps(model.base_url)}}}
channels:
  telegram: {{token: "${{T_TOKEN}}", api_base_url: {json.dumps(url)}, poll_timeout: 1}}
""",
                encoding="utf-8",
            )

        write(f"{telegram.base_url}/wrong")  # a URL that is no Bot API: getMe answers 404
        process = await start_daemon(config, tmp_path, log_path=log_path, T_TOKEN=TOKEN)
        try:

            async def down_with_404() -> bool:
                return "check api_base_url" in log_path.read_text(errors="replace")

            await until(down_with_404, "the 404")
            write(telegram.base_url)
            process.send_signal(signal.SIGHUP)

            async def healthy() -> bool:
                try:
                    status, _ = await loop.run_in_executor(None, _healthz, port)
                except OSError:
                    return False
                return status == 200

            await until(healthy, "telegram up after the reload")
            assert await stop_daemon(process) == 0
        finally:
            await reap(process)
    log = log_path.read_text(encoding="utf-8")
    assert "Traceback" not in log and "rejected" not in log
    assert "restarting telegram" in log


def test_a_config_error_exits_2(tmp_path: Path) -> None:
    config = tmp_path / "botd.yaml"
    config.write_text("channels: {telegram: {token: t, poll_timeout: -1}}\n", encoding="utf-8")
    result = run_botd("run", "--config", str(config))
    assert result.returncode == 2
    assert "poll_timeout" in result.stderr and "Traceback" not in result.stderr


def test_an_unusable_state_dir_exits_2(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the state directory should be\n", encoding="utf-8")
    config = tmp_path / "botd.yaml"
    config.write_text(
        f"state_dir: {json.dumps(str(blocker / 'state'))}\n"
        "channels: {telegram: {token: t, api_base_url: 'http://127.0.0.1:9/'}}\n",
        encoding="utf-8",
    )
    result = run_botd("run", "--config", str(config))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("botd: "), result.stderr


async def _trickle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A server that answers one byte at a time, a second apart: each read is quick enough
    for a client's read timeout, the answer never ends."""
    try:
        for byte in b"HTTP/1.1 200 OK\r\n" * 1000:
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(1)
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


async def test_a_channel_whose_start_hangs_holds_up_no_other(tmp_path: Path) -> None:
    # Telegram is listed first and its server never finishes an answer: the channels start
    # side by side and the daemon goes on without the slow one, so Slack answers while
    # Telegram is still starting.
    hanging = await asyncio.start_server(_trickle, "127.0.0.1", 0)
    log_path = tmp_path / "daemon.log"
    try:
        async with FakeSlack() as slack, FakeAnthropicAPI() as model:
            config = _config(
                tmp_path,
                slack_url=slack.base_url,
                telegram_port=hanging.sockets[0].getsockname()[1],
                model_url=model.base_url,
            )
            written = config.read_text(encoding="utf-8")
            slack_part = written[written.index("  slack:") : written.index("  telegram:")]
            config.write_text(written.replace(slack_part, "") + slack_part, encoding="utf-8")
            process = await start_daemon(config, tmp_path, log_path=log_path, T_TOKEN=TOKEN)
            try:
                model.push(stream(text("Slack still answers")))
                event = {"type": "message", "channel": "D1", "channel_type": "im", "user": "U1"}
                await slack.wait_socket(HANG_GUARD)
                await slack.send_event(event_callback({**event, "text": "hi", "ts": "2.000001"}))

                async def answered() -> bool:
                    return bool(slack.calls_to("chat.postMessage"))

                await until(answered, "slack answers")
                logged = log_path.read_text(errors="replace")
                assert "channel(s) telegram still starting" in logged
                assert "channel telegram down" not in logged  # its start had not even failed
            finally:
                assert await stop_daemon(process) == 0
    finally:
        hanging.close()
    assert "Traceback" not in log_path.read_text(errors="replace")
