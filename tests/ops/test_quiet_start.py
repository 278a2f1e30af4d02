"""A quiet start: one line naming botd's version, its config, state dir and channels; each
scheduler announced once; other libraries' warnings about what botd does not use at DEBUG."""

from __future__ import annotations

import io
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import discord
import pytest

import botd
import botd.channels.discord.adapter  # names discord.py's voice warnings not botd's concern
from botd.ops.logging import configure_logging
from tests.fakes.discord_api import FakeDiscordAPI
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.daemon_inprocess import config_yaml, daemon_running, discord_yaml, telegram_yaml

SCRIPTED = "model:\n  provider: scripted\n"


@pytest.fixture
def voice_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    """discord.py warns once per process that voice is unsupported (PyNaCl, davey missing):
    as in a new process, whatever an earlier test in this one did."""
    assert not discord.VoiceClient.warn_nacl or not _installed("nacl")
    monkeypatch.setattr(discord.VoiceClient, "warn_nacl", True)
    monkeypatch.setattr(discord.VoiceClient, "warn_dave", True)


def _installed(module: str) -> bool:
    from importlib.util import find_spec

    return find_spec(module) is not None


@pytest.fixture
def root_logging() -> Iterator[None]:
    """The root logger put back as it was after a test configures it."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in root.handlers[:]:
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)


@pytest.mark.usefixtures("voice_warnings")
async def test_a_start_logs_one_line_of_what_runs_and_each_scheduler_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with FakeTelegramAPI() as telegram, FakeDiscordAPI() as discord_api:
        # One channels: section holding both.
        both = telegram_yaml(telegram) + discord_yaml(discord_api).removeprefix("channels:\n")
        config = config_yaml(tmp_path, SCRIPTED, both)
        path = tmp_path / "botd.yaml"
        async with daemon_running(config, config_path=path):
            pass
    lines = capsys.readouterr().err.splitlines()
    started = (
        f"INFO botd.app botd {botd.__version__} starting: config {path}, "
        f"state {os.path.abspath(tmp_path / 'state')}, channels telegram, discord"
    )
    ours = [line for line in lines if " botd." in line]
    assert ours and ours[0].endswith(started), lines
    assert sum(line.endswith(" Scheduler started") for line in lines) == 1, lines
    assert not [line for line in lines if "voice will NOT be supported" in line], lines
    assert not [line for line in lines if " WARNING " in line], lines


def test_discord_voice_warnings_show_at_debug_only(
    capsys: pytest.CaptureFixture[str], voice_warnings: None, root_logging: None
) -> None:
    out = io.StringIO()
    configure_logging("INFO", stream=out)
    discord.Client(intents=discord.Intents.default())
    assert out.getvalue() == ""
    logging.getLogger("discord.client").warning("a warning of discord.py's that concerns botd")
    assert "WARNING discord.client a warning of discord.py's that concerns botd" in out.getvalue()

    discord.VoiceClient.warn_nacl = discord.VoiceClient.warn_dave = True
    out = io.StringIO()
    configure_logging("DEBUG", stream=out)
    discord.Client(intents=discord.Intents.default())
    lines = out.getvalue().splitlines()
    assert any("DEBUG discord.client PyNaCl is not installed" in line for line in lines), lines
    assert not any("WARNING" in line for line in lines), lines
