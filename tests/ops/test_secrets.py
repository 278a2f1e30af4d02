"""Configured secrets never reach anything botd writes: logs, errors, the state dir, /metrics.

Each scenario runs ``botd run`` as a child at DEBUG, in text and in JSON log format, then
searches stderr, stdout, every file of the state directory (the SQLite database and its WAL
included) and the health endpoint's bodies for every secret and every 8-character piece of
one. The secrets have no recognisable shape, so only their registration can mask them.
"""

from __future__ import annotations

import asyncio
import json
import signal
import urllib.request
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.fakes.anthropic_api import ErrorReply, FakeAnthropicAPI, stream, text
from tests.fakes.discord_api import FakeDiscordAPI
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.daemon_process import (
    HANG_GUARD,
    daemon_env,
    reap,
    start_botd,
    start_daemon,
    stop_daemon,
)
from tests.support.health_probe import free_port
from tests.support.waiting import file_contains, until

TELEGRAM_TOKEN = "q9Zr-Tk7pLw2"
API_KEY = "Hn4+wQ8v/Ze1%x"
SLACK_BOT = "Vb3#kLm9Qe7r"
SLACK_APP = "Zt5!pR2wYx8n"
SLACK_SIGNING = "Jd6@uF1s"
WRONG_TOKEN = "m3Xc_Rv8Kq1d"
DISCORD_TOKEN = "Dk2&mN5=vB8p"
SECRETS = (TELEGRAM_TOKEN, API_KEY, SLACK_BOT, SLACK_APP, SLACK_SIGNING, WRONG_TOKEN, DISCORD_TOKEN)
SECRET_ENV = {
    "D_TOKEN": DISCORD_TOKEN,
    "T_TOKEN": TELEGRAM_TOKEN,
    "M_KEY": API_KEY,
    "S_BOT": SLACK_BOT,
    "S_APP": SLACK_APP,
    "S_SIGN": SLACK_SIGNING,
}
DM = 777

pytestmark = pytest.mark.parametrize("fmt", ["text", "json"])


def _pieces(secret: str) -> list[str]:
    return [secret[i : i + 8] for i in range(len(secret) - 7)]


def _leaks(where: str, data: bytes) -> list[str]:
    found = []
    for secret in SECRETS:
        for piece in _pieces(secret):
            if piece.encode() in data:
                found.append(f"{where}: {piece!r} of a secret")
    return found


def _written(state: Path, *outputs: tuple[str, bytes]) -> list[str]:
    """Every leak in the given outputs and in every file under ``state``."""
    leaks = []
    for where, data in outputs:
        leaks += _leaks(where, data)
    for path in sorted(state.rglob("*")):
        if path.is_file():
            leaks += _leaks(str(path.relative_to(state)), path.read_bytes())
    return leaks


def _closed_url() -> str:
    return f"http://127.0.0.1:{free_port()}/"


def _config(
    tmp_path: Path,
    fmt: str,
    *,
    telegram_url: str,
    model_url: str,
    token_var: str = "T_TOKEN",
    slack_url: str | None = None,
    discord: FakeDiscordAPI | None = None,
    health_port: int | None = None,
) -> Path:
    slack = (
        f"""
  slack:
    bot_token: ${{S_BOT}}
    app_token: ${{S_APP}}
    signing_secret: ${{S_SIGN}}
    api_base_url: {json.dumps(slack_url)}
"""
        if slack_url
        else ""
    )
    if discord is not None:
        slack += f"""
  discord:
    token: ${{D_TOKEN}}
    api_base_url: {json.dumps(discord.base_url)}
    gateway_url: {json.dumps(discord.gateway_url)}
    guild_ready_timeout: 0.05
"""
    health = (
        f"health: {{enabled: true, port: {health_port}}}\n"
        if health_port
        else "health: {enabled: false}\n"
    )
    config = tmp_path / "botd.yaml"
    config.write_text(
        f"""
state_dir: {json.dumps(str(tmp_path / "state"))}
logging: {{level: DEBUG, format: {fmt}}}
{health}model:
  provider: anthropic
  name: claude-test
  api_key: ${{M_KEY}}
  base_url: {json.dumps(model_url)}
  max_retry_wait: 1
channels:
  telegram:
    token: ${{{token_var}}}
    api_base_url: {json.dumps(telegram_url)}
    dm_policy: open
{slack}""",
        encoding="utf-8",
    )
    return config


def _get(url: str) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=HANG_GUARD) as response:
            body: bytes = response.read()
            return body
    except urllib.error.HTTPError as exc:  # 503 while degraded still has a body
        return exc.read()


async def test_a_normal_run_writes_no_secret(tmp_path: Path, fmt: str) -> None:
    port = free_port()
    async with (
        FakeTelegramAPI(TELEGRAM_TOKEN) as telegram,
        FakeAnthropicAPI(api_key=API_KEY) as model,
        FakeDiscordAPI() as discord,
    ):
        config = _config(
            tmp_path,
            fmt,
            telegram_url=telegram.base_url,
            model_url=model.base_url,
            discord=discord,
            health_port=port,
        )
        model.push(stream(text("Hello ", "Ada!")))
        log_path = tmp_path / "daemon.log"
        process = await start_daemon(config, tmp_path, log_path=log_path, **SECRET_ENV)
        try:
            telegram.push_text(DM, "hi there")
            await telegram.wait_for_call("sendMessage", 1, timeout=HANG_GUARD)
            # A model API that echoes the key (URL-encoded) in its error: the notice in the chat
            # and the transcript are masked.
            echoed = quote(API_KEY, safe="")
            model.push(ErrorReply(400, "invalid_request_error", f"bad key {echoed} given"))
            telegram.push_text(DM, "again")
            await telegram.wait_for_call("sendMessage", 2, timeout=HANG_GUARD)
            # A reload adds Slack (new secrets) whose server is out of reach: it fails alone.
            _config(
                tmp_path,
                fmt,
                telegram_url=telegram.base_url,
                model_url=model.base_url,
                discord=discord,
                health_port=port,
                slack_url=_closed_url(),
            )
            process.send_signal(signal.SIGHUP)
            await until(
                file_contains(log_path, "channel slack down"), "channel slack down in the log"
            )
            loop = asyncio.get_running_loop()
            healthz = await loop.run_in_executor(None, _get, f"http://127.0.0.1:{port}/healthz")
            metrics = await loop.run_in_executor(None, _get, f"http://127.0.0.1:{port}/metrics")
            assert await stop_daemon(process) == 0
        finally:
            await reap(process)
    sent = [c.params["text"] for c in telegram.calls_to("sendMessage", ok_only=True)]
    assert sent[0] == "Hello Ada!"
    assert "bad key *** given" in sent[1]
    log = log_path.read_bytes()
    assert b"DEBUG" in log  # the run logged at DEBUG: third-party loggers included
    assert b"/getUpdates" in log  # httpx's request lines are there, token masked
    if fmt == "json":
        for line in log.decode().splitlines():
            json.loads(line)
    assert [i["token"] for i in discord.identifies] == [DISCORD_TOKEN]
    assert (
        b'"discord": "running"' in healthz and b'"slack": "down"' in healthz and b"botd_" in metrics
    )
    leaks = _written(tmp_path / "state", ("log", log), ("/healthz", healthz), ("/metrics", metrics))
    assert leaks == []


async def _run_until_down(config: Path, cwd: Path, *args: str, **env: str) -> tuple[int, bytes]:
    """``botd [args] run`` until its log says a channel is down, then SIGTERM: the exit
    status and the log (stderr)."""
    log_path = cwd / "daemon.log"
    process = await start_botd(
        [*args, "run", "--config", str(config)],
        cwd,
        env=daemon_env(**SECRET_ENV, **env),
        log_path=log_path,
        stdout_too=True,
    )
    try:
        await until(file_contains(log_path, " down: "), "a channel down in the log")
        status = await stop_daemon(process)
    finally:
        await reap(process)
    return status, log_path.read_bytes()


def _down_lines(log: bytes, channel: str) -> list[str]:
    return [line for line in log.decode().splitlines() if f"channel {channel} down: " in line]


async def test_a_rejected_token_gives_one_masked_line(tmp_path: Path, fmt: str) -> None:
    async with (
        FakeTelegramAPI(TELEGRAM_TOKEN) as telegram,
        FakeAnthropicAPI(api_key=API_KEY) as model,
    ):
        config = _config(
            tmp_path,
            fmt,
            telegram_url=telegram.base_url,
            model_url=model.base_url,
            token_var="T_WRONG",
        )
        status, log = await _run_until_down(config, tmp_path, T_WRONG=WRONG_TOKEN)
    assert [c.status for c in telegram.calls_to("getMe")][:1] == [401]
    assert status == 0  # the channel was down, the daemon ran until told to stop
    assert b"Traceback" not in log
    lines = _down_lines(log, "telegram")
    assert lines and "rejected" in lines[0]
    assert _written(tmp_path / "state", ("log", log)) == []


async def test_an_unreachable_server_gives_one_masked_line(tmp_path: Path, fmt: str) -> None:
    async with FakeAnthropicAPI(api_key=API_KEY) as model:
        config = _config(
            tmp_path,
            fmt,
            telegram_url=_closed_url(),
            model_url=model.base_url,
            slack_url=_closed_url(),
        )
        status, log = await _run_until_down(config, tmp_path)
    assert status == 0
    assert b"Traceback" not in log
    assert _down_lines(log, "telegram") or _down_lines(log, "slack")
    assert _written(tmp_path / "state", ("log", log)) == []


async def test_debug_shows_the_traceback_masked(tmp_path: Path, fmt: str) -> None:
    async with (
        FakeTelegramAPI(TELEGRAM_TOKEN) as telegram,
        FakeAnthropicAPI(api_key=API_KEY) as model,
    ):
        config = _config(
            tmp_path,
            fmt,
            telegram_url=telegram.base_url,
            model_url=model.base_url,
            token_var="T_WRONG",
        )
        config.write_text(
            config.read_text(encoding="utf-8").replace("level: DEBUG", "level: WARNING"),
            encoding="utf-8",
        )
        status, log = await _run_until_down(config, tmp_path, "--debug", T_WRONG=WRONG_TOKEN)
    assert status == 0
    assert b"Traceback" in log and b"DEBUG" in log  # --debug: tracebacks and DEBUG lines
    assert _written(tmp_path / "state", ("log", log)) == []
