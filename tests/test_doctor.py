"""``botd doctor`` as a child process against the loopback fakes.

Each scenario writes a config naming the fakes, runs ``botd doctor --config``, and reads its
lines: one per check, ``✓``/``✗``, with what to do on ``✗``; exit 0 only when every check
passes, 1 when a probe fails, 2 when the config is invalid. No run's output may contain a
configured secret or any 8-character piece of one.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import pytest

from botd.statelock import StateLock
from botd.store import SCHEMA_VERSION, Store
from tests.daemon_process import BOTD, HANG_GUARD, daemon_env
from tests.fakes.anthropic_api import FakeAnthropicAPI
from tests.fakes.discord_api import FLAG_MESSAGE_CONTENT_LIMITED, FakeDiscordAPI
from tests.fakes.openai_api import FakeOpenAI
from tests.fakes.slack_api import FakeSlack
from tests.fakes.telegram_api import FakeTelegramAPI, server_error

TELEGRAM_TOKEN = "424242:q9ZrTk7pLw2xVb"
WRONG_TELEGRAM = "424242:m3XcRv8Kq1dJh"
MODEL_KEY = "sk-Hn4wQ8vZe1xKp"
SLACK_BOT = "xoxb-Vb3kLm9Qe7rT"
SLACK_APP = "xapp-Zt5pR2wYx8nU"
DISCORD_TOKEN = "Dk2mN5vB8pQr4Ls"
SECRETS = (TELEGRAM_TOKEN, WRONG_TELEGRAM, MODEL_KEY, SLACK_BOT, SLACK_APP, DISCORD_TOKEN)
ENV = {
    "T_TOKEN": TELEGRAM_TOKEN,
    "M_KEY": MODEL_KEY,
    "S_BOT": SLACK_BOT,
    "S_APP": SLACK_APP,
    "D_TOKEN": DISCORD_TOKEN,
}


@dataclass
class Report:
    status: int
    out: str
    err: str

    @property
    def lines(self) -> list[str]:
        return self.out.splitlines()

    def failed(self) -> list[str]:
        return [line for line in self.lines if line.startswith("✗")]

    def passed(self) -> list[str]:
        return [line for line in self.lines if line.startswith("✓")]

    def line_with(self, text: str) -> str:
        """The first check line containing ``text`` (not the config line, which names paths)."""
        found = [line for line in self.lines if text in line and " config " not in line[:9]]
        assert found, f"no line with {text!r} in:\n{self.out}{self.err}"
        return found[0]


def _closed_url(path: str = "/") -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}{path}"


async def doctor(
    config: Path | None, cwd: Path, *, options: tuple[str, ...] = (), **env: str
) -> Report:
    args = ["doctor", *options] + (["--config", str(config)] if config else [])
    process = await asyncio.create_subprocess_exec(
        *BOTD,
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=cwd,
        env=daemon_env(**{**ENV, "PYTHONIOENCODING": "utf-8", **env}),
    )
    out, err = await asyncio.wait_for(process.communicate(), HANG_GUARD)
    assert process.returncode is not None
    report = Report(process.returncode, out.decode(), err.decode())
    for secret in SECRETS:
        for start in range(len(secret) - 7):
            piece = secret[start : start + 8]
            assert piece not in report.out + report.err, f"{piece!r} of a secret leaked"
    return report


def write_config(
    tmp_path: Path,
    *,
    telegram: str | None = None,
    slack: str | None = None,
    discord: FakeDiscordAPI | None = None,
    model: str = "provider: scripted",
    extra: str = "",
) -> Path:
    channels = ""
    if telegram is not None:
        channels += f"""
  telegram:
    token: ${{T_TOKEN}}
    api_base_url: {json.dumps(telegram)}
{extra}"""
    if slack is not None:
        channels += f"""
  slack:
    bot_token: ${{S_BOT}}
    app_token: ${{S_APP}}
    api_base_url: {json.dumps(slack)}
"""
    if discord is not None:
        channels += f"""
  discord:
    token: ${{D_TOKEN}}
    api_base_url: {json.dumps(discord.base_url)}
    gateway_url: {json.dumps(discord.gateway_url)}
"""
    if not channels:
        channels = "\n  console: {enabled: true}"
    config = tmp_path / "botd.yaml"
    config.write_text(
        f"""
state_dir: {json.dumps(str(tmp_path / "state"))}
model:
  {model}
channels:{channels}
""",
        encoding="utf-8",
    )
    return config


def anthropic(fake: FakeAnthropicAPI) -> str:
    """The ``model`` section's lines for the fake Anthropic API."""
    return f"provider: anthropic\n  api_key: ${{M_KEY}}\n  base_url: {json.dumps(fake.base_url)}"


# --------------------------------------------------------------------------- all good


async def test_every_check_passes_against_the_fakes(tmp_path: Path) -> None:
    async with (
        FakeTelegramAPI(token=TELEGRAM_TOKEN) as telegram,
        FakeSlack() as slack,
        FakeDiscordAPI(token=DISCORD_TOKEN) as discord,
        FakeAnthropicAPI(api_key=MODEL_KEY) as model,
    ):
        config = write_config(
            tmp_path,
            telegram=telegram.base_url,
            slack=slack.base_url,
            discord=discord,
            model=anthropic(model),
        )
        report = await doctor(config, tmp_path)
    assert report.status == 0, report.out + report.err
    assert report.failed() == []
    assert "@botd_test_bot" in report.line_with("telegram: token accepted")
    report.line_with("telegram: no webhook set")
    report.line_with("telegram: privacy mode on")
    report.line_with("slack: bot token accepted")
    report.line_with("slack: app token accepted, Socket Mode available")
    assert report.line_with("slack: the bot token's scopes").endswith("channels and DMs")
    report.line_with("discord: token accepted")
    report.line_with("discord: gateway reachable")
    report.line_with("discord: message content intent enabled")
    report.line_with("model (anthropic")
    report.line_with("does not exist yet; botd creates it")
    assert report.lines[-1] == f"all {len(report.passed())} checks passed"
    # The probes were the read-only ones, and the websocket was never opened.
    assert [call.method for call in slack.calls] == ["auth.test", "apps.connections.open"]
    assert slack.calls_to("auth.test")[0].token == SLACK_BOT
    assert slack.calls_to("apps.connections.open")[0].token == SLACK_APP
    assert slack.connections == 0
    assert [call.method for call in telegram.calls] == ["getMe", "getWebhookInfo"]
    assert not (tmp_path / "state").exists()  # doctor creates nothing


async def test_without_config_checks_the_default(tmp_path: Path) -> None:
    report = await doctor(None, tmp_path)
    assert report.status == 0, report.out + report.err
    report.line_with("model: scripted (no API)")


async def test_openai_compatible_models_list(tmp_path: Path) -> None:
    async with FakeOpenAI(api_key=MODEL_KEY, models=("other",)) as fake:
        model = (
            f"provider: openai\n  name: fake-model\n  api_key: ${{M_KEY}}\n"
            f"  base_url: {json.dumps(fake.base_url)}"
        )
        config = write_config(tmp_path, telegram=_closed_url(), model=model)
        report = await doctor(config, tmp_path)
        line = report.line_with("model (openai")
        assert line.startswith("✓") and "not in its list" in line
        report = await doctor(config, tmp_path, M_KEY="sk-wrong-key-000")
    line = report.line_with("model (openai")
    assert line.startswith("✗") and "API key was rejected" in line and "model.api_key" in line


async def test_each_fallback_model_is_probed_with_its_own_key(tmp_path: Path) -> None:
    async with (
        FakeAnthropicAPI(api_key=MODEL_KEY) as primary,
        FakeOpenAI(api_key="sk-fallback-right", models=("gpt-fake",)) as fallback,
    ):
        model = (
            anthropic(primary)
            + "\n  fallbacks:\n    - provider: openai\n      name: gpt-fake\n"
            + f"      api_key: ${{F_KEY}}\n      base_url: {json.dumps(fallback.base_url)}"
        )
        config = write_config(tmp_path, telegram=_closed_url(), model=model)
        report = await doctor(config, tmp_path, F_KEY="sk-fallback-right")
        line = report.line_with("model.fallbacks[0] (openai, gpt-fake)")
        assert line.startswith("✓") and "API key accepted" in line
        report.line_with("model (anthropic")
        report = await doctor(config, tmp_path, F_KEY="sk-fallback-wrong")
    line = report.line_with("model.fallbacks[0] (openai")
    assert line.startswith("✗") and "check model.fallbacks[0].api_key" in line


# --------------------------------------------------------------------------- telegram


async def test_rejected_telegram_token(tmp_path: Path) -> None:
    async with FakeTelegramAPI(token=TELEGRAM_TOKEN) as telegram:
        config = write_config(tmp_path, telegram=telegram.base_url)
        report = await doctor(config, tmp_path, T_TOKEN=WRONG_TELEGRAM)
    assert report.status == 1
    line = report.line_with("telegram:")
    assert line.startswith("✗ telegram: the token was rejected")
    assert "401" in line and "@BotFather" in line and "channels.telegram.token" in line
    assert report.failed() == [line]
    assert report.lines[-1].endswith("checks failed")


@pytest.mark.parametrize("suffix", ["/v2", "/bot/x"])
async def test_wrong_telegram_base_url_says_check_api_base_url(tmp_path: Path, suffix: str) -> None:
    async with FakeTelegramAPI(token=TELEGRAM_TOKEN) as telegram:
        config = write_config(tmp_path, telegram=telegram.base_url + suffix)
        report = await doctor(config, tmp_path)
    assert report.status == 1
    line = report.line_with("telegram:")
    assert line.startswith("✗") and "404" in line
    assert "check channels.telegram.api_base_url" in line
    assert "rejected" not in line


async def test_404_with_a_malformed_token_names_both_suspects(tmp_path: Path) -> None:
    async with FakeTelegramAPI(token=TELEGRAM_TOKEN) as telegram:
        config = write_config(tmp_path, telegram=telegram.base_url + "/v2")
        report = await doctor(config, tmp_path, T_TOKEN="not-a-telegram-token")
    line = report.line_with("telegram:")
    assert "api_base_url" in line and "does not look like one from @BotFather" in line


async def test_telegram_base_url_ending_in_bot_is_accepted(tmp_path: Path) -> None:
    async with FakeTelegramAPI(token=TELEGRAM_TOKEN) as telegram:
        config = write_config(tmp_path, telegram=telegram.base_url + "/bot")
        report = await doctor(config, tmp_path)
    assert report.status == 0, report.out + report.err


async def test_unreachable_telegram_names_the_url_not_the_token(tmp_path: Path) -> None:
    url = _closed_url("")
    config = write_config(tmp_path, telegram=url)
    report = await doctor(config, tmp_path)
    assert report.status == 1
    line = report.line_with("telegram:")
    assert line.startswith(f"✗ telegram: cannot reach {url} (")
    assert "api_base_url" in line


async def test_telegram_webhook_and_privacy_hints(tmp_path: Path) -> None:
    extra = "    groups: {'-100': {require_mention: false}}\n"
    async with FakeTelegramAPI(token=TELEGRAM_TOKEN) as telegram:
        # A webhook URL often carries the token; the output masks it (see ``doctor``).
        telegram.webhook_url = f"https://example.org/hook/{TELEGRAM_TOKEN}"
        config = write_config(tmp_path, telegram=telegram.base_url, extra=extra)
        report = await doctor(config, tmp_path)
        assert report.status == 1
        webhook = report.line_with("telegram: a webhook")
        # A hint, not a failure: botd's polling deletes the webhook when it starts.
        assert webhook.startswith("✓") and "https://example.org/hook" in webhook
        assert "deleteWebhook" in webhook and "<token>" in webhook
        privacy = report.line_with("telegram: privacy mode")
        assert privacy.startswith("✗") and "/setprivacy" in privacy

        telegram.webhook_url = ""
        telegram.can_read_all_group_messages = True
        report = await doctor(config, tmp_path)
    assert report.status == 0, report.out
    report.line_with("privacy mode off")


async def test_telegram_server_trouble_and_dropped_connection(tmp_path: Path) -> None:
    async with FakeTelegramAPI(token=TELEGRAM_TOKEN) as telegram:
        config = write_config(tmp_path, telegram=telegram.base_url)
        telegram.fail_next("getMe", server_error(502))
        report = await doctor(config, tmp_path)
        assert report.status == 1
        line = report.line_with("telegram:")
        assert line.startswith("✗") and "502" in line and "try again later" in line

        telegram.reset_next("getMe")
        report = await doctor(config, tmp_path)
        assert report.status == 1
        assert report.line_with("telegram:").startswith(
            f"✗ telegram: cannot reach {telegram.base_url}"
        )

        telegram.fail_next("getWebhookInfo", server_error(500))
        report = await doctor(config, tmp_path)
    assert report.status == 1
    report.line_with("telegram: token accepted")
    assert report.line_with("getWebhookInfo").startswith("✗")


async def test_a_server_that_never_answers_times_out(tmp_path: Path) -> None:
    held: list[asyncio.StreamWriter] = []

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)  # read nothing, answer nothing

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        config = write_config(tmp_path, telegram=f"http://127.0.0.1:{port}")
        report = await doctor(config, tmp_path, options=("--timeout", "0.2"))
    finally:
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()
    assert report.status == 1
    line = report.line_with("telegram:")
    assert line.startswith("✗ telegram: cannot reach") and "no answer within 0.2 s" in line


# --------------------------------------------------------------------------- slack


async def test_unreachable_slack(tmp_path: Path) -> None:
    url = _closed_url("/api/")
    config = write_config(tmp_path, slack=url)
    report = await doctor(config, tmp_path)
    assert report.status == 1
    line = report.line_with("slack:")
    assert line.startswith(f"✗ slack: cannot reach {url} (")
    assert "channels.slack.api_base_url" in line


async def test_rejected_slack_tokens(tmp_path: Path) -> None:
    async with FakeSlack() as slack:
        config = write_config(tmp_path, slack=slack.base_url)
        slack.fail_next("auth.test", "invalid_auth")
        report = await doctor(config, tmp_path)
        assert report.status == 1
        line = report.line_with("slack:")
        assert line.startswith("✗ slack: the bot token was rejected (auth.test: invalid_auth)")
        assert "channels.slack.bot_token" in line

        slack.fail_next("apps.connections.open", "not_allowed_token_type")
        report = await doctor(config, tmp_path)
    assert report.status == 1
    report.line_with("slack: bot token accepted")
    line = report.line_with("app token")
    assert line.startswith("✗") and "connections:write" in line


async def test_slack_scopes_the_bot_token_lacks(tmp_path: Path) -> None:
    async with FakeSlack() as slack:
        config = write_config(tmp_path, slack=slack.base_url)
        slack.scopes = ["chat:write", "app_mentions:read", "channels:history", "im:history"]
        report = await doctor(config, tmp_path)
        assert report.status == 0, report.out + report.err
        line = report.line_with("slack: the bot token's scopes")
        assert line.startswith("✓")
        assert "without files:read files users send are not read" in line
        assert "without groups:history private channels are not heard" in line

        slack.scopes = ["app_mentions:read", "channels:history", "files:read"]
        report = await doctor(config, tmp_path)
        assert report.status == 1
        line = report.line_with("slack: the bot token lacks")
        assert line.startswith("✗ slack: the bot token lacks chat:write (it cannot post), ")
        assert "im:history (it does not hear direct messages)" in line
        assert "Bot Token Scopes" in line and "reinstall" in line
        assert "files:read" not in line.partition(":")[2].partition("add the scopes")[0]

        slack.scopes = None  # a proxy that drops the header: nothing to judge by
        report = await doctor(config, tmp_path)
    assert report.status == 0
    assert not [line for line in report.lines if "slack: the bot token" in line]


async def test_slack_server_errors(tmp_path: Path) -> None:
    async with FakeSlack() as slack:
        config = write_config(tmp_path, slack=slack.base_url + "nope/")
        report = await doctor(config, tmp_path)
        assert report.status == 1
        assert "404" in report.line_with("✗ slack:")
        assert "channels.slack.api_base_url" in report.line_with("✗ slack:")

        config = write_config(tmp_path, slack=slack.base_url)
        slack.fail_next("auth.test", "internal_error", status=500)
        report = await doctor(config, tmp_path)
    assert report.status == 1
    assert "internal_error" in report.line_with("✗ slack: auth.test failed")


# --------------------------------------------------------------------------- discord


async def test_discord_without_message_content_intent(tmp_path: Path) -> None:
    async with FakeDiscordAPI(token=DISCORD_TOKEN, application_flags=0) as discord:
        config = write_config(tmp_path, discord=discord)
        report = await doctor(config, tmp_path)
    assert report.status == 1
    line = report.line_with("message content intent")
    assert line.startswith("✗") and "Privileged Gateway Intents" in line
    report.line_with("discord: token accepted")
    assert discord.identifies == []  # the gateway was not connected to


async def test_rejected_discord_token(tmp_path: Path) -> None:
    flags = FLAG_MESSAGE_CONTENT_LIMITED
    async with FakeDiscordAPI(token="another-token-x", application_flags=flags) as discord:
        config = write_config(tmp_path, discord=discord)
        report = await doctor(config, tmp_path)
    assert report.status == 1
    line = report.line_with("discord:")
    assert line.startswith("✗ discord: the bot token was rejected")
    assert "channels.discord.token" in line


async def test_discord_wrong_base_url(tmp_path: Path) -> None:
    async with FakeDiscordAPI(token=DISCORD_TOKEN) as discord:
        config = write_config(tmp_path, discord=discord)
        text = config.read_text().replace(discord.base_url, discord.base_url + "/v9")
        config.write_text(text)
        report = await doctor(config, tmp_path)
    assert report.status == 1
    line = report.line_with("discord:")
    assert line.startswith("✗") and "404" in line and "channels.discord.api_base_url" in line


# --------------------------------------------------------------------------- model


async def test_rejected_model_key(tmp_path: Path) -> None:
    async with FakeAnthropicAPI(api_key="sk-the-right-one") as model:
        config = write_config(tmp_path, model=anthropic(model))
        report = await doctor(config, tmp_path)
    assert report.status == 1
    line = report.line_with("model (anthropic")
    assert line.startswith("✗") and "API key was rejected" in line and "model.api_key" in line


async def test_unreachable_model_names_the_url(tmp_path: Path) -> None:
    url = _closed_url("")
    model = f"provider: anthropic\n  api_key: ${{M_KEY}}\n  base_url: {json.dumps(url)}"
    report = await doctor(write_config(tmp_path, model=model), tmp_path)
    assert report.status == 1
    assert report.line_with("model (anthropic").startswith("✗ model (anthropic, ")
    assert f"cannot reach {url}" in report.line_with("model (anthropic")


async def test_model_base_url_answering_404(tmp_path: Path) -> None:
    async with FakeAnthropicAPI(api_key=MODEL_KEY) as model:
        lines = anthropic(model).replace(model.base_url, model.base_url + "/v1")
        report = await doctor(write_config(tmp_path, model=lines), tmp_path)
    assert report.status == 1
    line = report.line_with("model (anthropic")
    assert line.startswith("✗") and "404" in line and "check model.base_url" in line


# --------------------------------------------------------------------------- state dir


async def test_locked_state_dir_names_the_holder(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    with StateLock(tmp_path / "state"):
        report = await doctor(config, tmp_path)
    assert report.status == 0, report.out
    line = report.line_with("in use by a running botd")
    assert line.startswith("✓") and f"pid {os.getpid()}" in line


async def test_unlocked_state_dir_and_current_database_left_unchanged(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with StateLock(state):
        pass
    Store.open(state).close()
    before = {p.name: p.read_bytes() for p in state.iterdir()}
    report = await doctor(write_config(tmp_path), tmp_path)
    assert report.status == 0, report.out
    report.line_with("state dir not in use")
    report.line_with(f"database opens, schema {SCHEMA_VERSION} (current)")
    assert {p.name: p.read_bytes() for p in state.iterdir()} == before


async def test_old_database_is_not_migrated_by_doctor(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    with sqlite3.connect(state / "botd.sqlite3") as conn:
        conn.execute("PRAGMA user_version=1")
    report = await doctor(write_config(tmp_path), tmp_path)
    assert report.status == 0, report.out
    assert report.line_with(f"migrated to {SCHEMA_VERSION} when botd starts").startswith(
        "✓ database"
    )
    with sqlite3.connect(state / "botd.sqlite3") as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 1


@pytest.mark.parametrize(
    ("content", "expected"),
    [(b"not a database at all, just text" * 4, "not a SQLite database"), (None, "newer")],
)
async def test_unusable_database(tmp_path: Path, content: bytes | None, expected: str) -> None:
    state = tmp_path / "state"
    state.mkdir()
    db = state / "botd.sqlite3"
    if content is None:
        with sqlite3.connect(db) as conn:
            conn.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    else:
        db.write_bytes(content)
    report = await doctor(write_config(tmp_path), tmp_path)
    assert report.status == 1
    line = report.line_with("✗ database")
    assert expected in line


async def test_state_dir_that_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "state").write_text("oops")
    report = await doctor(write_config(tmp_path), tmp_path)
    assert report.status == 1
    assert report.line_with("state dir").startswith("✗")
    assert "not a directory" in report.line_with("state dir")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads and writes any file")
async def test_unreadable_lock_file(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with StateLock(state):
        pass
    (state / "botd.lock").chmod(0)
    report = await doctor(write_config(tmp_path), tmp_path)
    assert report.status == 1
    assert report.line_with("lock file").startswith("✗ cannot read the lock file")


# --------------------------------------------------------------------------- config


async def test_invalid_config_exits_2_before_probing(tmp_path: Path) -> None:
    config = tmp_path / "botd.yaml"
    config.write_text("model: {provider: nonsense}\nchannels: {telegram: {}}\n")
    report = await doctor(config, tmp_path)
    assert report.status == 2
    assert report.out == ""
    assert "config invalid" in report.err


async def test_missing_config_file_exits_2(tmp_path: Path) -> None:
    report = await doctor(tmp_path / "absent.yaml", tmp_path)
    assert report.status == 2
    assert report.out == ""


def test_lock_holder_read_from_proc_locks_without_locking(tmp_path: Path) -> None:
    from botd.doctor.state import _flock_held

    lock = tmp_path / "botd.lock"
    lock.write_text("")
    info = lock.stat()
    device = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}"
    table = tmp_path / "locks"
    fd = os.open(lock, os.O_RDONLY)
    try:
        cases = {
            f"1: FLOCK  ADVISORY  WRITE 42 {device}:{info.st_ino} 0 EOF\n": True,
            f"1: FLOCK  ADVISORY  READ 42 {device}:{info.st_ino} 0 EOF\n": False,
            f"1: POSIX  ADVISORY  WRITE 42 {device}:{info.st_ino} 0 EOF\n": False,
            f"1: -> FLOCK  ADVISORY  WRITE 43 {device}:{info.st_ino} 0 EOF\n": False,
            f"1: FLOCK  ADVISORY  WRITE 42 ff:ff:{info.st_ino} 0 EOF\n": None,  # overlayfs
            f"1: FLOCK  ADVISORY  WRITE 42 {device}:{info.st_ino + 1} 0 EOF\n": False,
            "": False,
        }
        for text, expected in cases.items():
            table.write_text(text)
            assert _flock_held(fd, table) is expected, text
        assert _flock_held(fd, tmp_path / "absent") is None
    finally:
        os.close(fd)
