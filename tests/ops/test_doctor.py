"""``botd doctor`` as a child process against the loopback fakes.

Each scenario writes a config naming the fakes, runs ``botd doctor --config``, and reads its
lines: one per check, ``✓``/``⚠``/``✗``, with what to do unless ``✓``; exit 0 when no check
fails (``--strict``: nor warns), 1 when one does, 2 when the config is invalid. No run's
output may contain a configured secret or any 8-character piece of one.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import sqlite3
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from botd.ops.ports import listen_problem
from botd.ops.statelock import StateLock
from botd.store.pairing import PairingFile
from botd.store.sqlite import SCHEMA_VERSION, SqliteStore
from tests.fakes.anthropic_api import FakeAnthropicAPI
from tests.fakes.discord_api import FLAG_MESSAGE_CONTENT_LIMITED, FakeDiscordAPI
from tests.fakes.openai_api import FakeOpenAI
from tests.fakes.proxies import HttpProxy, Socks5Proxy
from tests.fakes.slack_api import FakeSlack
from tests.fakes.telegram_api import FakeTelegramAPI, server_error
from tests.ops.harness import (
    DISCORD_TOKEN,
    MODEL_KEY,
    SLACK_APP,
    SLACK_BOT,
    TELEGRAM_TOKEN,
    WRONG_TELEGRAM,
    Report,
    doctor,
    write_config,
)
from tests.support.config_reference import EXAMPLE
from tests.support.daemon_process import botd_command, daemon_env
from tests.support.health_probe import free_port


def _closed_url(path: str = "/") -> str:
    return f"http://127.0.0.1:{free_port()}{path}"


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
    # Working, but not as most would mean it: each platform answers in no group.
    assert [line.split(":")[0] for line in report.warned()] == [
        "⚠ telegram",
        "⚠ slack",
        "⚠ discord",
    ]
    assert all("group_policy allowlist with no group" in line for line in report.warned())
    checks = len(report.passed()) + 3
    assert report.lines[-1] == f"all {checks} checks passed; 3 warnings"
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
        assert report.line_with("model (openai").startswith("✓ model (openai, fake-model): API")
        line = report.line_with("does not know the model")
        assert line.startswith("⚠ model (openai, fake-model): ")
        assert "fake-model, which is not in its list of models" in line
        assert line.endswith("check model.name")
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
    assert "checks failed" in report.lines[-1]


async def test_each_telegram_bot_is_probed_under_its_own_name(tmp_path: Path) -> None:
    """Two Telegram channels, the second (``support``) with a token Telegram refuses: each
    is probed with its own section, and the lines and fixes name the channel they are of."""
    async with FakeTelegramAPI(token=TELEGRAM_TOKEN) as telegram:
        config = write_config(tmp_path, telegram=telegram.base_url)
        config.write_text(
            config.read_text(encoding="utf-8")
            + f"""  support:
    platform: telegram
    token: ${{W_TOKEN}}
    api_base_url: {json.dumps(telegram.base_url)}
""",
            encoding="utf-8",
        )
        report = await doctor(config, tmp_path, W_TOKEN=WRONG_TELEGRAM)
    assert report.status == 1
    assert report.line_with("telegram: token accepted").startswith("✓")
    [refused] = report.failed()
    assert refused.startswith("✗ support: the token was rejected")
    assert "check channels.support.token" in refused and "channels.telegram" not in refused


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


async def test_telegram_webhook_mode_compares_what_telegram_has_set(tmp_path: Path) -> None:
    hook = "https://bot.example.org/telegram"
    extra = f"    mode: webhook\n    webhook_url: {hook}\n    webhook_secret: ${{T_HOOK}}\n"
    async with FakeTelegramAPI(token=TELEGRAM_TOKEN) as telegram:
        config = write_config(tmp_path, telegram=telegram.base_url, extra=extra)
        report = await doctor(config, tmp_path, T_HOOK="hook-Secret_9")
        assert report.status == 1
        line = report.line_with("telegram: the webhook set is")
        assert line.startswith("✗")
        assert f"none, not channels.telegram.webhook_url ({hook})" in line

        telegram.webhook_url = "https://elsewhere.example.org/x"
        report = await doctor(config, tmp_path, T_HOOK="hook-Secret_9")
        assert "is https://elsewhere.example.org/x, not" in report.line_with("webhook set is")

        telegram.webhook_url = hook
        telegram.push_text(777, "waiting")
        telegram.last_error_message = "Wrong response from the webhook: 502 Bad Gateway"
        report = await doctor(config, tmp_path, T_HOOK="hook-Secret_9")
        line = report.line_with("last delivery failed")
        assert line.startswith("✗") and "502 Bad Gateway" in line and "1 update(s)" in line

        telegram.last_error_message = ""
        report = await doctor(config, tmp_path, T_HOOK="hook-Secret_9")
        assert report.line_with(f"telegram: webhook {hook} set").startswith("✓")


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
    SqliteStore.open(state).close()
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
    from botd.ops.doctor.state import _flock_held

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


# --------------------------------------------------------------------------- the example


async def test_the_example_copied_as_it_is_passes_check_and_doctor(tmp_path: Path) -> None:
    config = tmp_path / "botd.yaml"
    shutil.copyfile(EXAMPLE, config)
    taken = listen_problem("127.0.0.1", 8480)  # the example's health port, as it is
    if taken is not None:
        pytest.skip(f"the example's health port is taken on this machine: {taken}")
    async with (
        FakeTelegramAPI(token=TELEGRAM_TOKEN) as telegram,
        FakeAnthropicAPI(api_key=MODEL_KEY) as model,
    ):
        # The example's own variables: its secrets, and where its two APIs are.
        env = {
            "TELEGRAM_TOKEN": TELEGRAM_TOKEN,
            "ANTHROPIC_API_KEY": MODEL_KEY,
            "TELEGRAM_API_BASE_URL": telegram.base_url,
            "ANTHROPIC_BASE_URL": model.base_url,
        }
        elsewhere = tmp_path / "elsewhere"  # run from another directory than the file's
        elsewhere.mkdir()
        check = await botd_check(config, elsewhere, **env)
        report = await doctor(config, elsewhere, options=("--strict",), **env)
    assert check.status == 0, check.err
    assert check.out == (
        "config OK: channels: telegram; provider: anthropic (claude-sonnet-4-5); 0 scheduled jobs\n"
    )
    assert check.err == ""  # not one warning
    assert report.status == 0, report.out + report.err
    assert report.failed() == [] and report.warned() == []
    report.line_with("telegram: token accepted")
    assert report.line_with("model (anthropic, claude-sonnet-4-5)").startswith("✓")
    report.line_with(f"state dir {tmp_path / 'var'} does not exist yet")  # next to the file
    assert [call.method for call in telegram.calls] == ["getMe", "getWebhookInfo"]


async def botd_check(config: Path, cwd: Path, **env: str) -> Report:
    args = ["check", "--config", str(config)]
    env = daemon_env(**{"PYTHONIOENCODING": "utf-8", **env})
    return Report(*await botd_command(args, cwd, env))


# --------------------------------------------------------------------------- warnings


def write_text(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    config = tmp_path / "botd.yaml"
    # Last, so the line numbers the tests expect are the text's own; 8480 may be taken.
    health = "" if "health:" in text else "health: {enabled: false}\n"
    config.write_text(f"state_dir: {json.dumps(str(tmp_path / 'state'))}\n{text}{health}")
    config.chmod(mode)
    return config


async def test_the_scripted_provider_on_a_real_channel_warns(tmp_path: Path) -> None:
    async with FakeTelegramAPI(token=TELEGRAM_TOKEN) as telegram:
        # No model section: ANTHROPIC_API_KEY in the environment does not make one.
        config = write_text(
            tmp_path,
            "channels:\n  telegram:\n    token: ${T_TOKEN}\n"
            f"    api_base_url: {json.dumps(telegram.base_url)}\n    group_policy: disabled\n",
        )
        report = await doctor(config, tmp_path, ANTHROPIC_API_KEY=MODEL_KEY)
        assert report.status == 0, report.out + report.err
        (line,) = report.warned()
        assert line.startswith(
            "⚠ model: the scripted provider (canned replies, no model) answers on telegram "
            "(the config has no model: section; ANTHROPIC_API_KEY is set, but only botd run "
            "without --config uses it)"
        )
        assert "provider: anthropic" in line
        assert report.lines[-1].endswith("checks passed; 1 warning")

        strict = await doctor(config, tmp_path, options=("--strict",))
        assert strict.status == 1
        assert strict.warned() and strict.failed() == []

    # On the console alone canned replies are what one asked for.
    console = write_text(tmp_path, "channels:\n  console: {enabled: true}\n")
    report = await doctor(console, tmp_path, options=("--strict",))
    assert report.status == 0 and report.warned() == [], report.out


async def test_an_access_policy_that_admits_nobody_warns(tmp_path: Path) -> None:
    async with FakeTelegramAPI(token=TELEGRAM_TOKEN) as telegram:
        channel = (
            "model: {provider: scripted}\nchannels:\n  telegram:\n    token: ${T_TOKEN}\n"
            f"    api_base_url: {json.dumps(telegram.base_url)}\n"
        )
        # What botd init writes: an allowlist with nobody on it; groups left at allowlist.
        config = write_text(tmp_path, channel + "    dm_policy: allowlist\n    allow_from: []\n")
        report = await doctor(config, tmp_path)
        assert report.status == 0, report.out + report.err
        scripted, dms, groups = report.warned()
        assert dms.startswith(
            "⚠ telegram: dm_policy allowlist with an empty allow_from, and nobody approved by "
            "pairing: no one can DM the bot: add user ids to channels.telegram.allow_from"
        )
        assert groups.startswith(
            "⚠ telegram: group_policy allowlist with no group under groups: the bot answers in "
            'no group: list the groups by id under channels.telegram.groups ("*" for every '
            "group), or set group_policy: disabled"
        )
        assert scripted.startswith("⚠ model: the scripted provider")

        # Someone approved by pairing is admitted under the allowlist; a group listed too.
        await PairingFile(tmp_path / "state" / "pairing.json").issue("telegram", "7", "Ann")
        book = PairingFile(tmp_path / "state" / "pairing.json")
        assert await book.approve("telegram", (await book.pending())[0][0]) == "7"
        config = write_text(
            tmp_path,
            channel + "    dm_policy: allowlist\n    groups: {'-100': {require_mention: true}}\n",
        )
        report = await doctor(config, tmp_path)
        assert [line.split(":")[0] for line in report.warned()] == ["⚠ model"], report.out

        # A group list whose every group is switched off admits no group either.
        config = write_text(
            tmp_path, channel + "    groups: {'*': {enabled: false}}\n    allow_from: [7]\n"
        )
        report = await doctor(config, tmp_path)
        assert "group_policy allowlist with no group" in report.line_with("⚠ telegram")


async def test_a_literal_secret_in_a_file_others_may_read_warns(tmp_path: Path) -> None:
    async with FakeTelegramAPI(token=TELEGRAM_TOKEN) as telegram:
        text = (
            "model: {provider: scripted}\nchannels:\n  telegram:\n"
            f"    token: {json.dumps(TELEGRAM_TOKEN)}\n"
            f"    api_base_url: {json.dumps(telegram.base_url)}\n    group_policy: disabled\n"
        )
        config = write_text(tmp_path, text, mode=0o644)
        report = await doctor(config, tmp_path)  # asserts the token is in no output
        assert report.status == 0, report.out + report.err
        line = report.line_with("a secret written in the file")
        assert line == (
            f"⚠ {config}:5: channels.telegram.token: a secret written in the file, which "
            "others may read (mode 0644): write it as ${VAR} and keep the value in the "
            f"environment, or chmod 600 {config}"
        )
        check = await botd_check(config, tmp_path)
        assert check.status == 0
        assert check.err.splitlines() == [line]

        config.chmod(0o640)  # the group may read it: as bad
        report = await doctor(config, tmp_path)
        assert "(mode 0640)" in report.line_with("a secret written in the file")

        config.chmod(0o600)  # only botd's user: fine
        report = await doctor(config, tmp_path)
        assert not [line for line in report.lines if "a secret written" in line]
        # ${VAR} in a readable file is fine too.
        config = write_text(tmp_path, text.replace(json.dumps(TELEGRAM_TOKEN), "${T_TOKEN}"))
        config.chmod(0o644)
        report = await doctor(config, tmp_path)
        assert not [line for line in report.lines if "a secret written" in line]


async def test_placeholder_ids_from_the_reference_warn(tmp_path: Path) -> None:
    text = (
        "model: {provider: scripted}\nchannels:\n  console: {enabled: true}\n"
        "scheduler:\n  jobs:\n    - id: standup\n      every: 1h\n      prompt: p\n"
        '      deliver_to: {channel: console, chat: "-1001234567890"}\n'
        "agent:\n  message_targets: [console/C0123456789]\n"
    )
    config = write_text(tmp_path, text)
    check = await botd_check(config, tmp_path)
    assert check.status == 0
    assert check.err.splitlines() == [
        f"⚠ {config}:10: scheduler.jobs[0].deliver_to.chat: -1001234567890 is a placeholder "
        "id from the reference config, not a real chat or user: put the real id here "
        "(/whoami in the chat tells it) or remove the entry",
        f"⚠ {config}:12: agent.message_targets[0]: C0123456789 is a placeholder id from the "
        "reference config, not a real chat or user: put the real id here (/whoami in the chat "
        "tells it) or remove the entry",
    ]
    report = await doctor(config, tmp_path)
    assert report.status == 0
    assert [line.split(": ", 1)[0] for line in report.warned()] == [
        f"⚠ {config}:10",
        f"⚠ {config}:12",
    ]


async def test_the_health_port_in_use_warns(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        text = (
            "channels:\n  console: {enabled: true}\n"
            f"health: {{enabled: true, host: 127.0.0.1, port: {port}}}\n"
        )
        config = write_text(tmp_path, text)
        report = await doctor(config, tmp_path)
        assert report.status == 0, report.out + report.err
        assert report.warned() == [
            f"⚠ health.port: cannot listen on 127.0.0.1:{port}: Address already in use, so "
            "botd run would stop at start: stop what listens there, or choose another "
            "health.port"
        ]
        # Held by the botd running on this state dir, it is that botd's endpoint.
        with StateLock(tmp_path / "state"):
            report = await doctor(config, tmp_path, options=("--strict",))
        assert report.status == 0, report.out
        line = report.line_with("health endpoint")
        assert line.startswith(f"✓ health endpoint: 127.0.0.1:{port} is taken, presumably by")
    report = await doctor(config, tmp_path, options=("--strict",))
    assert report.status == 0, report.out
    assert report.line_with("health endpoint") == f"✓ health endpoint: 127.0.0.1:{port} is free"


async def test_an_anthropic_model_the_api_does_not_know_warns(tmp_path: Path) -> None:
    async with FakeAnthropicAPI(api_key=MODEL_KEY) as model:
        model.aliases = {"claude-fake-latest": "claude-fake"}
        config = write_config(tmp_path, model=anthropic(model) + "\n  name: claude-sonet-4-5")
        report = await doctor(config, tmp_path)
        assert report.status == 0, report.out + report.err
        (line,) = report.warned()
        assert line == (
            f"⚠ model (anthropic, claude-sonet-4-5): {model.base_url} does not know the model "
            "claude-sonet-4-5, which is not in its list of models (did you mean "
            "claude-sonnet-4-5-20250929?): check model.name"
        )
        # An alias the list does not show, but the API resolves: known.
        for name in ("claude-sonnet-4-5", "claude-fake-latest", "claude-fake"):
            config = write_config(tmp_path, model=anthropic(model) + f"\n  name: {name}")
            report = await doctor(config, tmp_path, options=("--strict",))
            assert report.status == 0, (name, report.out)


async def test_strict_and_json(tmp_path: Path) -> None:
    async with FakeTelegramAPI(token=TELEGRAM_TOKEN) as telegram:
        config = write_config(tmp_path, telegram=telegram.base_url)  # groups: allowlist, none
        report = await doctor(config, tmp_path, options=("--json",))
        assert report.status == 0, report.out + report.err
        data = json.loads(report.out)  # one document, nothing else on stdout
        assert data["status"] == "warn"
        names = {check["name"]: check for check in data["checks"]}
        assert names["config"]["status"] == "ok"
        assert names["telegram.token"] == {
            "name": "telegram.token",
            "status": "ok",
            "detail": f"telegram: token accepted, bot @botd_test_bot ({telegram.base_url})",
        }
        assert names["channels.telegram.group_policy"]["status"] == "warn"
        assert "set group_policy: disabled" in names["channels.telegram.group_policy"]["detail"]
        assert names["model.provider"]["status"] == "warn"
        assert {"telegram.webhook", "telegram.privacy", "model", "state_dir"} <= set(names)
        assert all(check["status"] in ("ok", "warn", "fail") for check in data["checks"])

        strict = await doctor(config, tmp_path, options=("--json", "--strict"))
        assert strict.status == 1
        assert json.loads(strict.out)["status"] == "warn"

        report = await doctor(config, tmp_path, options=("--json",), T_TOKEN=WRONG_TELEGRAM)
    assert report.status == 1
    data = json.loads(report.out)
    assert data["status"] == "fail"
    (bad,) = [check for check in data["checks"] if check["status"] == "fail"]
    assert bad["name"] == "telegram.token" and "the token was rejected" in bad["detail"]

    broken = tmp_path / "broken.yaml"
    broken.write_text("model: {provider: nonsense}\n")
    report = await doctor(broken, tmp_path, options=("--json",))
    assert report.status == 2 and report.err == ""
    data = json.loads(report.out)
    assert data["status"] == "fail"
    (problem,) = data["checks"]
    assert problem["name"] == "config" and problem["status"] == "fail"
    assert problem["detail"].startswith(f"{broken}:1: model.provider: ")


# --------------------------------------------------------------------------- proxies


async def test_each_probe_goes_through_its_section_s_proxy(tmp_path: Path) -> None:
    """Telegram and the model through a SOCKS5 proxy without credentials; Slack and Discord
    through an HTTP one with them; a second Telegram bot through the HTTP one with a wrong
    password: its line names it and the proxy, never the password."""
    password, wrong = "Vx8qLm3Rt6Zw", "Kd5nBy2Hc9Qe"
    async with (
        FakeTelegramAPI(token=TELEGRAM_TOKEN) as telegram,
        FakeSlack() as slack,
        FakeDiscordAPI(token=DISCORD_TOKEN) as discord,
        FakeAnthropicAPI(api_key=MODEL_KEY) as model,
        Socks5Proxy() as socks,
        HttpProxy(user="botd", password=password) as http,
    ):
        authed = json.dumps(http.url.replace(password, "${P_PASS}"))
        config = write_config(
            tmp_path,
            telegram=telegram.base_url,
            slack=slack.base_url,
            discord=discord,
            model=f"{anthropic(model)}\n  proxy: {json.dumps(socks.url)}",
            extra=f"""    proxy: {json.dumps(socks.url)}
  support:
    platform: telegram
    token: ${{T_TOKEN}}
    api_base_url: {json.dumps(telegram.base_url)}
    proxy: {json.dumps(http.url.replace(password, "${P_WRONG}"))}""",
        )
        text = config.read_text(encoding="utf-8")
        text = text.replace(
            f"api_base_url: {json.dumps(slack.base_url)}\n",
            f"api_base_url: {json.dumps(slack.base_url)}\n    proxy: {authed}\n",
        ).replace(
            "guild_ready_timeout: 0.05\n", f"guild_ready_timeout: 0.05\n    proxy: {authed}\n"
        )
        config.write_text(text, encoding="utf-8")
        report = await doctor(config, tmp_path, P_PASS=password, P_WRONG=wrong)
    assert report.status == 1, report.out + report.err
    [failed] = report.failed()
    assert failed.startswith("✗ support: cannot reach")
    assert "the proxy refused the credentials: 407 Proxy Authentication Required" in failed
    assert password not in report.out + report.err and wrong not in report.out + report.err
    report.line_with("telegram: token accepted")
    report.line_with("slack: bot token accepted")
    report.line_with("discord: token accepted")
    report.line_with("model (anthropic")
    routes: list[tuple[str, HttpProxy | Socks5Proxy]] = [
        (telegram.base_url, socks),
        (model.base_url, socks),
        (slack.base_url, http),
        (discord.base_url, http),
    ]
    for url, proxy in routes:
        port = urlsplit(url).port
        assert port is not None and proxy.reached(port), f"{url} not through {proxy.url}"
    assert http.refused == 1  # the support bot's probe, refused before it reached Telegram
