"""Secret masking in-process: which config values are secrets, and every form of one masked."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast
from urllib.parse import quote, quote_plus

import pytest
from pydantic import BaseModel, Field

from botd.app import App
from botd.cli import build_parser
from botd.config import (
    BotdConfig,
    ChatChannelSection,
    ConfigError,
    OptionalSecret,
    Secret,
    parse_config,
    registered_channels,
    secret_values,
)
from botd.config.schema import ModelSection
from botd.ops.logging import (
    add_secret,
    asyncio_exception_handler,
    configure_logging,
    install_exception_hooks,
    mask_secrets,
)
from tests.support.daemon_process import BOTD, HANG_GUARD, daemon_env


@pytest.fixture
def restore_root_logger() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)


def _pieces(secret: str) -> list[str]:
    return [secret[i : i + 8] for i in range(len(secret) - 7)] or [secret]


def _clean(text: str, *secrets: str) -> bool:
    return not any(piece in text for secret in secrets for piece in _pieces(secret))


# --------------------------------------------------------------------------- config


class _PluginSection(ChatChannelSection):
    password: str | None = None  # unmarked, but named like a secret
    api_secret: Secret
    headers: dict[str, Secret] = Field(default_factory=dict)
    fallback_keys: list[Secret] = Field(default_factory=list)
    extra_key: OptionalSecret = None
    label: str = "visible"


class _Plugin:
    section: type[BaseModel] = _PluginSection

    def missing(self) -> str | None:
        return None


def test_every_builtin_secret_field_is_collected() -> None:
    config = parse_config(
        """
model: {provider: anthropic, api_key: "${KEY}", base_url: "https://bob:pw-9x7@example.test/v1"}
channels:
  telegram: {token: tg-secret-1}
  slack: {bot_token: sl-bot-1, app_token: sl-app-1, signing_secret: sl-sign-1}
  discord: {token: dc-token-1, allow_bots: false}
""",
        {"KEY": "from-env-key"},
    )
    assert secret_values(config) == {
        "from-env-key",
        "pw-9x7",
        "tg-secret-1",
        "sl-bot-1",
        "sl-app-1",
        "sl-sign-1",
        "dc-token-1",
    }


def test_a_plugin_section_s_secrets_are_found_marked_or_by_name() -> None:
    channels = {**registered_channels(), "plug": cast(Any, _Plugin())}
    config = parse_config(
        """
channels:
  plug:
    password: p4ss-word
    api_secret: marked-1
    headers: {Authorization: "Bearer hdr-val-1", X-Trace: trace-val}
    fallback_keys: [fb-key-1, fb-key-2]
    extra_key: opt-key-1
""",
        channels=channels,
    )
    assert secret_values(config) == {
        "p4ss-word",
        "marked-1",
        "Bearer hdr-val-1",
        "trace-val",
        "fb-key-1",
        "fb-key-2",
        "opt-key-1",
    }


def test_no_secret_and_empty_values_give_nothing() -> None:
    assert secret_values(BotdConfig()) == set()
    # A blank secret is refused when a file is loaded; built directly, it is still no secret.
    with pytest.raises(ConfigError, match="is blank"):
        parse_config("model: {provider: openai, name: m, api_key: ''}")
    blank = ModelSection.model_construct(provider="openai", name="m", api_key="")
    assert secret_values(BotdConfig.model_construct(model=blank)) == set()


# --------------------------------------------------------------------------- masking


def test_every_form_of_a_registered_secret_is_masked() -> None:
    secret = 'Zq"7\\p/w+ x%Ö'
    add_secret(secret)
    forms = [
        secret,
        quote(secret, safe=""),
        quote(secret, safe="/+"),
        re.sub("%[0-9A-F]{2}", lambda m: m.group().lower(), quote(secret, safe="")),
        quote_plus(secret),
        json.dumps(secret)[1:-1],
        json.dumps(secret, ensure_ascii=True)[1:-1],
        repr(secret)[1:-1],
        json.dumps(repr(secret)[1:-1])[1:-1],
    ]
    for form in forms:
        masked = mask_secrets(f"before {form} after")
        assert masked == "before *** after", form


def test_short_secrets_are_masked_and_tiny_or_empty_ones_ignored() -> None:
    add_secret("kQ4z")
    add_secret("ab3")
    add_secret("")
    assert mask_secrets("token kQ4z here") == "token *** here"
    assert mask_secrets("ab3 stays") == "ab3 stays"
    assert mask_secrets("") == ""


@pytest.mark.usefixtures("restore_root_logger")
@pytest.mark.parametrize("fmt", ["text", "json"])
def test_every_part_of_a_record_is_masked(fmt: str) -> None:
    secret = 'w8"Lr-Tq2\\mZ'
    add_secret(secret)
    out = io.StringIO()
    configure_logging("DEBUG", "json" if fmt == "json" else "text", stream=out)
    log = logging.getLogger("some.library")
    log.debug("GET http://h/bot%s/x?k=%s", secret, quote(secret, safe=""))
    log.info("extra", extra={"header": f"Bearer {secret}", "nested": {"k": secret}})
    try:
        raise RuntimeError(f"refused {secret!r}")
    except RuntimeError:
        log.exception("failed with %s", secret)
    log.info("stack", stack_info=True)
    text = out.getvalue()
    assert _clean(text, secret)
    assert text.count("***") >= 4
    if fmt == "json":
        records = [json.loads(line) for line in text.splitlines()]
        assert records[1]["header"] == "Bearer ***"
        assert "RuntimeError: refused" in records[2]["exc"]


@pytest.mark.usefixtures("restore_root_logger")
def test_uncaught_exceptions_are_logged_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "Uc7-hooks-Xq"
    add_secret(secret)
    out = io.StringIO()
    configure_logging("INFO", "json", stream=out)
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)
    monkeypatch.setattr(threading, "excepthook", threading.excepthook)
    install_exception_hooks()
    try:
        raise ValueError(f"main {secret}")
    except ValueError as exc:
        sys.excepthook(type(exc), exc, exc.__traceback__)

    def fail() -> None:
        raise ValueError(f"thread {secret}")

    thread = threading.Thread(target=fail)
    thread.start()
    thread.join(HANG_GUARD)

    loop = asyncio.new_event_loop()
    try:
        asyncio_exception_handler(
            loop, {"message": f"loop {secret}", "exception": ValueError(secret), "x": secret}
        )
    finally:
        loop.close()
    text = out.getvalue()
    records = [json.loads(line) for line in text.splitlines()]
    assert len(records) == 3
    assert "ValueError: main ***" in records[0]["msg"]
    assert "ValueError: thread ***" in records[1]["msg"]
    assert records[2]["msg"].startswith("loop ***")
    assert _clean(text, secret)


def test_an_exception_escaping_a_command_is_logged_masked(tmp_path: Path) -> None:
    secret = "Rk9-escape-Wz"
    program = (
        "import sys\n"
        "from botd.ops.logging import add_secret, install_exception_hooks\n"
        f"add_secret({secret!r})\n"
        "install_exception_hooks()\n"
        f"raise RuntimeError('boom ' + {secret!r})\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        env=daemon_env(),
        timeout=HANG_GUARD,
    )
    assert result.returncode == 1
    assert "RuntimeError: boom ***" in result.stderr
    assert _clean(result.stderr, secret)


# --------------------------------------------------------------------------- reload and CLI


class _Notifier:
    def notify(self, *lines: str) -> None:
        pass

    def ready(self, status: str = "") -> None:
        pass


async def test_a_reload_registers_the_new_config_s_secrets(tmp_path: Path) -> None:
    config_path = tmp_path / "botd.yaml"
    config_path.write_text("model: {provider: scripted}\n", encoding="utf-8")
    daemon = App(BotdConfig(), {"NEW_KEY": "Yh5-reload-Pq"}, config_path=config_path)
    config_path.write_text(
        "model: {provider: anthropic, api_key: '${NEW_KEY}'}\n", encoding="utf-8"
    )

    async def reload(config: BotdConfig, **channels: object) -> None:
        pass

    keeper = SimpleNamespace(reload=reload)
    skills = SimpleNamespace(load=lambda config: None)
    runtime = SimpleNamespace(
        config=None, keeper=keeper, skills=skills, update_channels=lambda new: None
    )
    assert await daemon.reload(cast(Any, runtime), cast(Any, _Notifier()))
    assert mask_secrets("key Yh5-reload-Pq") == "key ***"


def test_debug_is_accepted_before_and_after_the_command() -> None:
    parser = build_parser()
    assert parser.parse_args(["--debug", "run"]).debug is True
    assert parser.parse_args(["run", "--debug"]).debug is True
    assert parser.parse_args(["check", "--config", "x"]).debug is False


def test_check_prints_no_secret(tmp_path: Path) -> None:
    config = tmp_path / "botd.yaml"
    config.write_text(
        "model: {provider: anthropic, api_key: '${K}', base_url: 'https://u:${K}@h'}\n"
        "channels: {telegram: {token: '${K}', bogus: '${K}'}}\n",
        encoding="utf-8",
    )
    secret = "Cx4-check-Lm"
    result = subprocess.run(
        [*BOTD, "check", "--config", str(config)],
        capture_output=True,
        text=True,
        env=daemon_env(K=secret),
        timeout=HANG_GUARD,
    )
    assert result.returncode == 2
    assert "bogus" in result.stderr
    assert _clean(result.stdout + result.stderr, secret)
